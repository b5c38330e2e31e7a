"""`gpulease image build`: a Debian system from Debian's packages (debootstrap, as
diskimage-builder's elements do), set up for a rented server's first boot: cloud-init
reading a NoCloud config drive (hostname, SSH keys, root password, the data disk, the
agent's one-time token) and growing the root partition to the whole system disk, OpenSSH
with fresh host keys per server, DHCP on the first NIC, the serial console, and the node
agent (`gpulease-agent`, in /opt/gpulease with only what it imports; a systemd unit the
config drive starts). Laid out by disk.py, recorded with its size and SHA-256, and kept in
a cache named by the hash of its inputs (the same inputs are built once: the agent's own
source files are among them)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from gpulease.build_lock import building
from gpulease.osimage import disk

# The build's own version: change it when its steps change (the cache follows).
BUILDER = "gpulease-image-build/2"
PACKAGES = ("linux-image-cloud-amd64", "systemd-sysv", "udev", "openssh-server", "cloud-init",
            "ifupdown", "isc-dhcp-client", "netbase", "iproute2", "e2fsprogs", "fdisk", "gdisk",
            # growpart: cloud-init grows the root partition to the disk at first boot
            "cloud-guest-utils",
            # virtual packages debootstrap does not resolve (python3-cryptography needs it)
            "python3-cffi-backend",
            "ca-certificates",
            # the agent's own environment (/opt/gpulease)
            "python3", "python3-venv")
# What the agent imports beyond the standard library, pinned as gpulease itself pins them
AGENT_DEPENDENCIES = ("httpx", "typer", "rich", "pydantic", "babel", "boto3", "cryptography",
                      "prometheus-client", "nvidia-ml-py")
# The agent's modules: the image is rebuilt when one of their files changes
AGENT_MODULES = ("gpulease.cli.agent.__main__", "gpulease.agent.phonehome",
                 "gpulease.agent.server", "gpulease.agent.gpu.sampler",
                 "gpulease.agent.gpu.backends", "gpulease.agent.gpu.checks")


@dataclass(frozen=True)
class Recipe:
    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    packages: tuple[str, ...] = PACKAGES
    image_id: str = "debian12-lab"

    def digest(self) -> str:
        text = json.dumps([BUILDER, asdict(self), SETUP, agent_requirements(),
                           agent_sources_digest()], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Built:
    image_id: str
    path: str
    size_bytes: int
    sha256: str
    recipe: str  # the inputs' hash the cache is named by
    from_cache: bool


# Files written into the tree (path → content): the first boot's whole setup.
SETUP = {
    "etc/fstab": f"LABEL={disk.ROOT_LABEL} / ext4 defaults,errors=remount-ro 0 1\n",
    "etc/hostname": "localhost\n",
    "etc/network/interfaces": ("auto lo\niface lo inet loopback\n\nauto eth0\n"
                               "iface eth0 inet dhcp\n\nsource /etc/network/interfaces.d/*\n"),
    # only the config drive: no network metadata service is asked at boot
    # and no locale to generate (minbase has no `locales`: update-locale would fail, and
    # the agent reports cloud-init's errors)
    "etc/cloud/cloud.cfg.d/90_gpulease.cfg": ("datasource_list: [ NoCloud, None ]\n"
                                             "disable_root: false\nlocale: false\n"),
    "etc/ssh/sshd_config.d/gpulease.conf": "PermitRootLogin yes\nPasswordAuthentication yes\n",
    # the config drive writes agent.env (where the control plane is, the one-time token,
    # the GPU backend) and starts this unit
    "etc/systemd/system/gpulease-agent.service": (
        "[Unit]\nDescription=gpulease node agent (GPU telemetry, the control plane's "
        "commands)\nWants=network-online.target\nAfter=network-online.target\n"
        "ConditionPathExists=/etc/gpulease/agent.env\n\n[Service]\n"
        "EnvironmentFile=/etc/gpulease/agent.env\n"
        "ExecStart=/opt/gpulease/bin/gpulease-agent --backend ${GPULEASE_AGENT_BACKEND} "
        "--gpus ${GPULEASE_AGENT_GPUS} --control-plane ${GPULEASE_URL} "
        "--enroll-token-file /etc/gpulease/agent.env\nRestart=on-failure\nRestartSec=5\n\n"
        "[Install]\nWantedBy=multi-user.target\n"),
}
APPEND = "ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0"


def missing_tools() -> list[str]:
    return disk.missing_tools() + [t for t in ("debootstrap", "chroot")
                                   if shutil.which(t) is None]


def build(cache: Path, recipe: Recipe = Recipe(), log: Path | None = None) -> Built:
    """The image for `recipe`, from the cache when it was built before."""
    cache.mkdir(parents=True, exist_ok=True)
    name = f"{recipe.image_id}-{recipe.digest()}"
    with building(cache / f"{recipe.image_id}.lock"):  # another process may be building it
        return _build(cache, recipe, name, log)


def _build(cache: Path, recipe: Recipe, name: str, log: Path | None) -> Built:
    image, manifest = cache / f"{name}.raw", cache / f"{name}.json"
    if image.exists() and manifest.exists():
        return Built(**{**json.loads(manifest.read_text()), "from_cache": True})
    missing = missing_tools()
    if missing:
        raise RuntimeError("image build needs " + ", ".join(missing) + " (Debian: "
                           "debootstrap, fdisk, dosfstools, mtools, syslinux, "
                           "syslinux-common, e2fsprogs)")
    with tempfile.TemporaryDirectory(prefix="gpulease-rootfs-", dir=cache) as tmp:
        root = Path(tmp) / "root"
        with (log or Path(tmp) / "debootstrap.log").open("w") as out:
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=" + ",".join(recipe.packages),
                 recipe.suite, str(root), recipe.mirror], stdout=out, stderr=out,
                timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed (exit {done.returncode}); see its log")
        _set_up(root)
        with (log or Path(tmp) / "debootstrap.log").open("a") as out:
            _install_agent(root, Path(tmp), out)
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        initrds = sorted((root / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise RuntimeError("the tree has no /boot/vmlinuz-* and initrd.img-*")
        part = cache / f"{name}.raw.part"  # the image appears whole or not at all
        size = disk.assemble(root, disk.Boot(kernels[-1], initrds[-1], APPEND), part)
        sha = _sha256(part)
        part.replace(image)
    built = Built(recipe.image_id, str(image), size, sha, recipe.digest(), False)
    written = manifest.with_suffix(".json.part")
    written.write_text(json.dumps({k: v for k, v in asdict(built).items()
                                   if k != "from_cache"}, indent=2))
    written.replace(manifest)
    _prune(cache, recipe.image_id, keep=name)
    return built


def _prune(cache: Path, image_id: str, keep: str) -> None:
    """Older builds of the same image go (a deploy streaming one keeps its open file)."""
    for old in cache.glob(f"{image_id}-*.json"):
        built_here = re.fullmatch(re.escape(image_id) + r"-[0-9a-f]{16}", old.stem)
        if built_here and old.stem != keep and old.with_suffix(".raw").exists():
            old.with_suffix(".raw").unlink()
            old.unlink()


def _set_up(root: Path) -> None:
    for relative, text in SETUP.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()  # each server makes its own at first boot (cloud-init)
    (root / "etc" / "machine-id").write_text("")  # systemd makes one at first boot
    for cached in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        cached.unlink()
    subprocess.run(["chroot", str(root), "passwd", "-l", "root"], check=True,
                   capture_output=True)  # no password until the config drive sets one


def agent_requirements() -> list[str]:
    """AGENT_DEPENDENCIES as gpulease's own metadata pins them (name==version)."""
    pins: dict[str, str] = {}
    for requirement in importlib.metadata.requires("gpulease") or []:
        if ";" in requirement:  # an extra's
            continue
        name = requirement.split("==")[0].split("[")[0].strip().lower()
        pins[name] = requirement.strip()
    return [pins[name] for name in AGENT_DEPENDENCIES]


def _source_tree() -> Path:
    tree = Path(__file__).resolve().parent.parent.parent
    if not (tree / "pyproject.toml").exists():
        raise RuntimeError(f"the image carries the agent built from gpulease's source tree, "
                           f"which is not at {tree} (an installed copy without it)")
    return tree


def agent_sources_digest() -> str:
    """The hash of the source files the agent imports (found by importing it, apart)."""
    listed = subprocess.run(
        [sys.executable, "-c", "import sys\n" + "".join(f"import {m}\n" for m in AGENT_MODULES)
         + "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() if "
         "n.startswith('gpulease') and getattr(m, '__file__', None))))"],
        capture_output=True, text=True, check=True, timeout=120).stdout.split()
    digest = hashlib.sha256()
    for path in listed:
        digest.update(Path(path).name.encode() + Path(path).read_bytes())
    return digest.hexdigest()[:16]


def _run(command: list[str], out: IO[str]) -> None:
    done = subprocess.run(command, stdout=out, stderr=out, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} … failed (exit {done.returncode}); see "
                           "the build's log")


def _install_agent(root: Path, work: Path, out: IO[str]) -> None:
    """The agent into /opt/gpulease: its wheel and its dependencies' wheels fetched here
    (this machine's pip and index), installed in the image's own Python without an index."""
    wheels, source = work / "wheels", work / "source"
    pip = [sys.executable, "-m", "pip"]
    # built from a copy: setuptools leaves build/ and *.egg-info where it builds
    shutil.copytree(_source_tree(), source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".gpulease", "build", "*.egg-info", "__pycache__", "*_cache"))
    _run(pip + ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(source)],
         out)
    _run(pip + ["download", "--quiet", "--only-binary", ":all:", "--dest", str(wheels),
                *agent_requirements()], out)
    inside = root / "tmp" / "wheels"
    shutil.copytree(wheels, inside)
    _run(["chroot", str(root), "python3", "-m", "venv", "/opt/gpulease"], out)
    (own,) = [w.name for w in wheels.glob("gpulease-*.whl")]
    installer = ["chroot", str(root), "/opt/gpulease/bin/pip", "install", "--quiet",
                 "--no-index", "--find-links", "/tmp/wheels", "--no-cache-dir"]
    _run(installer + ["--no-deps", f"/tmp/wheels/{own}"], out)
    _run(installer + agent_requirements(), out)
    shutil.rmtree(inside)
    bin_dir = root / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "gpulease-agent").symlink_to("/opt/gpulease/bin/gpulease-agent")
    # on a rented server `gpulease agent …` is the agent (the rest runs on the platform)
    (bin_dir / "gpulease").write_text(
        '#!/bin/sh\n[ "$1" = agent ] && shift\nexec /opt/gpulease/bin/gpulease-agent "$@"\n')
    (bin_dir / "gpulease").chmod(0o755)


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def latest(cache: Path, image_id: str | None = None) -> Built | None:
    """The newest image built in `cache` (by its manifest), of `image_id` when given; or
    None."""
    manifests = sorted(cache.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for manifest in reversed(manifests):
        try:
            built = Built(**{**json.loads(manifest.read_text()), "from_cache": True})
        except (TypeError, ValueError):
            continue
        if Path(built.path).exists() and image_id in (None, built.image_id):
            return built
    return None
