"""Redaction masks secrets, not paths: $PWD and $OLDPWD (print working directory) are the user's folders, and a
trace whose paths were masked cannot be replayed. DB_PASSWORD / MYSQL_PWD-like values are still masked.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures_fake import MakeFake, medic_cli
from tools.redact import MASK, Redactor

DB_PASSWORD = "db-pass-Wq8Zr4Lm"
MYSQL_PWD = "mysql-pwd-Kd7Xn2Pq"


def test_working_directory_names_are_not_secrets_but_passwords_are(tmp_path: Path) -> None:
    sock = tmp_path / "agent.sock"
    sock.write_text("")
    red = Redactor.from_environment({
        "PWD": "/data/job/run-17", "OLDPWD": "/home/me/projects", "PWD_HINT": "/srv/jobs",
        "DB_PASSWORD": DB_PASSWORD, "MYSQL_PWD": MYSQL_PWD, "db_pwd": "lower-case-pw1",
        "SSH_AUTH_SOCK": str(sock), "OPENAI_KEY_FILE": "/etc/medic/openai.key", "SERVICE_TOKEN": "svc-9XkLq2Zp",
    })
    assert sorted(red.known) == sorted([DB_PASSWORD, MYSQL_PWD, "lower-case-pw1", "svc-9XkLq2Zp"])
    text = f"cd /data/job/run-17 from /home/me/projects with {DB_PASSWORD} and {MYSQL_PWD}"
    assert red.text(text) == f"cd /data/job/run-17 from /home/me/projects with {MASK} and {MASK}"
    env = {"PWD": "/data/job/run-17", "OLDPWD": "/x", "DB_PWD": "hunter2-pw", "AUTH_TOKEN": str(tmp_path)}
    assert red.data(env) == {"PWD": "/data/job/run-17", "OLDPWD": "/x", "DB_PWD": MASK,
                             "AUTH_TOKEN": str(tmp_path)}  # an existing path is a place, not a secret


def test_a_path_after_a_secret_named_flag_stays(tmp_path: Path) -> None:
    key = tmp_path / "server.key"
    key.write_text("")
    red = Redactor(keep=["/remote/certs/key.pem"])
    argv = ["serve", "--ssl-keyfile", str(key), "--api-key", "live-Zq82kLm", "--key-file", "/remote/certs/key.pem"]
    assert red.data(argv) == ["serve", "--ssl-keyfile", str(key), "--api-key", MASK, "--key-file",
                              "/remote/certs/key.pem"]
    assert red.text(f"python job.py --ssl-keyfile {key} --token tok-8Kq2Lm") == (
        f"python job.py --ssl-keyfile {key} --token {MASK}")


def test_job_paths_are_never_known_secrets() -> None:
    """A secret-named variable whose value is one of the job's own paths (not on this machine) stays a path."""
    red = Redactor.from_environment({"CHECKPOINT_SECRET_DIR_X": "/remote/job/work"}, keep=["/remote/job/work/"])
    assert red.known == []
    assert red.text("cd /remote/job/work") == "cd /remote/job/work"


def test_a_session_in_pwd_keeps_its_paths_and_replays(make_fake: MakeFake, tmp_path: Path) -> None:
    """medic's own $PWD/$OLDPWD and the job's PWD are the job's folders; the trace keeps them and replays."""
    fake = make_fake(mode="unattended", session_id="pwd", prelude=f"connecting with {DB_PASSWORD}\n",
                     env={"PWD": str(tmp_path / "work"), "DB_PASSWORD": DB_PASSWORD, "MYSQL_PWD": MYSQL_PWD})
    done = medic_cli("resume", "pwd", env={"PWD": str(tmp_path), "OLDPWD": str(tmp_path / "work")})
    assert done.returncode == 0, done.stderr
    raw = fake.trace_path.read_text()
    header = json.loads(raw.splitlines()[0])
    target = header["config"]["target"]
    assert (target["python"], target["workdir"]) == (str(fake.python), str(fake.work))
    assert target["env"]["PWD"] == str(fake.work)
    assert target["env"]["DB_PASSWORD"] == MASK and target["env"]["MYSQL_PWD"] == MASK
    assert DB_PASSWORD not in raw and MYSQL_PWD not in raw
    assert str(tmp_path) in raw and f"{MASK}/work" not in raw
    replayed = medic_cli("replay", str(fake.trace_path))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
