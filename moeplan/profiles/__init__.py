"""Data only: bundled model profiles (models/*.toml) and hardware presets."""
