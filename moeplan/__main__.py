from moeplan.cli import main

main()
