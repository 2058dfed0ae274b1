"""The pieces of tools/launch.py: job planning, launcher command lines, supervision."""
