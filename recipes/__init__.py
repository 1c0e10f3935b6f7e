"""Recipes: data only. Each *.toml is one capability; presets.toml lists preset images."""
