"""The bundled torch MoE offload executor (`moeplan bench`, `tune --validate`).

Only those commands import this package; torch is imported inside its modules, never on the
planning path. Entry point: moeplan.executor.run.run_bench.
"""
