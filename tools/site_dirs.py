"""Where a Python keeps installed distributions: a venv's ``site-packages``, a Debian Python's ``dist-packages``.
Every reading of "is this file installed code, and whose" goes through here."""

from __future__ import annotations

SITE_DIRS = ("site-packages", "dist-packages")


def package_of(path: str) -> str | None:
    """The top-level package a file belongs to: the first folder (or module) under a site folder."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in SITE_DIRS:
            return parts[i + 1].removesuffix(".py")
    return None


def installed_in(path: str, package: str) -> bool:
    """Whether ``path`` is ``package``'s installed code."""
    return any(f"/{site}/{package}/" in path for site in SITE_DIRS)


def below_site(path: str) -> str | None:
    """``path`` from its package on (``vllm/config.py``), or None when it is not under a site folder."""
    for site in SITE_DIRS:
        marker = f"/{site}/"
        if marker in path:
            return path.rsplit(marker, 1)[1] or None
    return None
