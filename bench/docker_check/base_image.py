"""Step 3: the base image ``docker/Dockerfile`` starts ``FROM``, made from Debian packages where no registry can be
reached, and trimmed as Debian's official slim images are so that the image built on it is the one users get."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.docker_check.repository import BASE_COMMENT, BASE_MARKER, CACHE, DEBIAN_MIRROR
from bench.docker_check.shell import CheckFailed, apt_install, docker, image_exists, log, sh

SLIM_DPKG = """\
# As in Debian's official slim images: no documentation, manual pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""
APT_CLEAN = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
SLIM_APT = f"""\
# As in Debian's official images: no package caches or translations left in image layers.
DPkg::Post-Invoke {{ "{APT_CLEAN}"; }};
APT::Update::Post-Invoke {{ "{APT_CLEAN}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
Acquire::GzipIndexes "true";
Apt::AutoRemove::SuggestsImportant "false";
"""
SOURCES = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: {suite} {suite}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: {suite}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def slim_rootfs(rootfs: Path, suite: str) -> None:
    """Trim a minbase root file system the way Debian's slim images are (debuerreotype): dpkg and apt settings that
    keep documentation and caches out of later layers, the same removed from what is installed, and the sources
    (main, updates, security) of the official image. The host's resolv.conf and hostname stay out of the image."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(SLIM_DPKG)
    (rootfs / "etc/apt/apt.conf.d/docker-slim").write_text(SLIM_APT)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(SOURCES.format(suite=suite))
    for name in ("etc/resolv.conf", "etc/hostname"):
        (rootfs / name).write_text("")
    share = rootfs / "usr/share"
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"):
        for path in rootfs.glob(pattern):
            path.unlink()
    for sub in ("man", "groff", "info", "lintian", "linda"):
        for path in (share / sub).glob("*"):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in (share / "locale").glob("*"):
        if path.name != "locale.alias":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in sorted((share / "doc").rglob("*"), reverse=True):
        if path.is_symlink() or path.is_file():
            if path.name != "copyright":
                path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def ensure_base(tag: str, remake: bool) -> dict:
    """The image the Dockerfile starts ``FROM``: kept when present (pulled, or made by an earlier run), else made
    from Debian packages. ``remake`` makes it again, but only when an earlier run made it."""
    if image_exists(tag):
        comment = docker("image", "inspect", "--format", "{{.Comment}}", tag)
        if not (remake and comment.startswith(BASE_MARKER)):
            return {"image": tag, "made_now": False, "origin": comment or "present on this machine (pulled)"}
        docker("image", "rm", tag)
    match = re.fullmatch(r"debian:(\w+)-slim", tag)
    if not match:
        raise CheckFailed(f"{tag} is not on this machine and only debian:<suite>-slim can be made here: pull it")
    suite = match[1]
    if not shutil.which("debootstrap"):
        apt_install(["debootstrap"])
    if os.geteuid() != 0:
        raise CheckFailed(f"making {tag} with debootstrap needs root")
    log(f"making {tag}: debootstrap --variant=minbase {suite} (about a minute)")
    t0 = time.monotonic()
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        sh(["debootstrap", "--variant=minbase", suite, str(rootfs), DEBIAN_MIRROR], timeout_s=1800)
        slim_rootfs(rootfs, suite)
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        comment = BASE_COMMENT.format(suite=suite)
        sh(["docker", "import", "-m", comment, "--change", 'CMD ["bash"]', "-", tag], stdin=tar.stdout)
        tar.wait()
    return {"image": tag, "made_now": True, "origin": comment, "seconds": round(time.monotonic() - t0, 1)}
