"""All reading of the outside world: model files, profiles, sysfs/procfs, NVML, timed copies."""
