"""Known failure signatures as YAML (one playbook a file), shipped inside the wheel as ``medic_playbooks``.

The folder stays at the repository top so people find and edit it; pyproject.toml maps it into the package.
agent/repair/playbooks.py reads it through importlib.resources.
"""
