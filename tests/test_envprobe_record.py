"""Which installed files differ from their wheel's RECORD (tools/envprobe.py): the files the wheel ships under
site-packages, read by sha256; never the installer's console scripts (``../../../bin/…`` in RECORD), which a venv
copied to another folder has rewritten for its own python (every pair lab of the space bench is such a copy)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from pathlib import Path

from tools.envprobe import probe_env
from tools.host import LocalHost


def sha(text: str) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def test_a_changed_module_counts_and_a_rewritten_console_script_does_not(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    shipped, script = "VALUE = 1\n", "#!/elsewhere/venv/bin/python\nfrom tool import main\n"
    (site / "tool").mkdir()
    (site / "tool" / "__init__.py").write_text(shipped)
    (venv / "bin" / "tool").write_text(script.replace("/elsewhere", str(tmp_path)))  # the copy's own shebang
    info = site / "tool-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tool\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"tool/__init__.py,{sha(shipped)},{len(shipped)}\n"
                                 f"../../../bin/tool,{sha(script)},{len(script)}\ntool-1.0.dist-info/RECORD,,\n")
    assert probe_env(LocalHost(), str(python), ("tool",), check_pristine=("tool",)).packages["tool"].modified == ()
    (site / "tool" / "__init__.py").write_text("VALUE = 2\n")
    changed = probe_env(LocalHost(), str(python), ("tool",), check_pristine=("tool",)).packages["tool"].modified
    assert changed == (str(site / "tool" / "__init__.py"),)
