"""The source probe's parts: each file is a stdlib-only module, and tools/source_probe.py joins them into the
one script that the target python runs. Nothing here may import medic or any third-party package."""
