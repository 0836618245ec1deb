# the collector's threshold (cli.GC_THRESHOLD) set before the imports, whose objects it would only scan
import gc

gc.set_threshold(100_000, *gc.get_threshold()[1:])

from moeplan.cli import main  # noqa: E402

main()
