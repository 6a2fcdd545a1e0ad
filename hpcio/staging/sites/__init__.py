"""Site profiles: a cluster's storage spaces, policies and Slurm names, as data.

Each ``<name>.toml`` beside this module describes one site (see ``jean-zay.toml`` for the
keys).  A profile applies only where it belongs: when ``HPCIO_SITE`` names it, or, with
``HPCIO_SITE`` unset, when the host name matches one of its ``[detect].hostnames``
patterns or one of its ``[detect].paths`` exists.  ``HPCIO_SITE=none`` turns detection
off.  Profiles never carry quota figures: those are read (:mod:`hpcio.staging.quota`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import socket
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

from ...errors import HpcioError

__all__ = ["SITE_ENV", "Site", "available_sites", "load_site", "detect_site"]

SITE_ENV = "HPCIO_SITE"
_HERE = Path(__file__).parent


@dataclasses.dataclass(frozen=True)
class Site:
    """One site profile: ``tiers`` maps a tier name to its keys (``env``, ``purge``...)."""

    name: str
    description: str = ""
    quota_command: str | None = None
    hostnames: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    qos: dict = dataclasses.field(default_factory=dict)
    tiers: dict = dataclasses.field(default_factory=dict)


def available_sites() -> list[str]:
    """Names of the profiles shipped with hpcio."""
    return sorted(p.stem for p in _HERE.glob("*.toml"))


def load_site(name: str) -> Site:
    """The profile ``name`` (a shipped ``<name>.toml``)."""
    path = _HERE / f"{name}.toml"
    if not path.is_file():
        raise HpcioError(f"{SITE_ENV}={name!r} names no site profile; known: {available_sites()} (or 'none')")
    data = tomllib.loads(path.read_text())
    site, detect = data.get("site", {}), data.get("detect", {})
    return Site(
        name=site.get("name", name),
        description=site.get("description", ""),
        quota_command=site.get("quota_command"),
        hostnames=tuple(detect.get("hostnames", ())),
        paths=tuple(detect.get("paths", ())),
        qos=dict(data.get("qos", {})),
        tiers={k: dict(v) for k, v in data.get("tiers", {}).items()},
    )


def detect_site(env: Mapping[str, str] | None = None, hostname: str | None = None,
                exists: Callable[[str], bool] = os.path.exists) -> Site | None:
    """The site this process runs on: ``$HPCIO_SITE``, else the first profile whose host
    name pattern or marker path matches; None on any other machine."""
    env = os.environ if env is None else env
    chosen = env.get(SITE_ENV, "").strip()
    if chosen:
        return None if chosen.lower() == "none" else load_site(chosen)
    host = socket.gethostname() if hostname is None else hostname
    for name in available_sites():
        site = load_site(name)
        if any(fnmatch.fnmatch(host, p) for p in site.hostnames) or any(exists(p) for p in site.paths):
            return site
    return None
