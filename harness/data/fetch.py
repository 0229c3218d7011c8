"""Pinned, sha256-verified dataset files: from an offline mirror or from GitHub at a fixed commit.

    python -m harness.data.fetch                                 # all files -> ~/.cache/harness/data
    python -m harness.data.fetch --only summeval,newsroom --dest data/
    python -m harness.data.fetch --mirror ../shared/data         # offline: copy and verify
    HARNESS_DATA_MIRROR=../shared/data python -m harness.data.fetch   # the same (--mirror wins; --mirror '' downloads)

A file already at the destination with the right sha256 is left alone; anything else is written
to a temporary file beside it, verified, then moved into place (os.replace), so an interrupted or
corrupt transfer never leaves a file that looks valid.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.data.manifest import (
    RAW_BASE,
    Source,
    default_data_dir,
    source_url,
    sources,
)
from harness.data.tasks import EXTRA_FILES, TASKS
from harness.errors import ConfigError, DataError, HarnessError

TIMEOUT_S = 60.0
RETRIES = 3
BACKOFF_S = 2.0
"""First wait between tries; doubles per try, capped at 10 s."""


@dataclass(frozen=True)
class FetchResult:
    """What ensure_data did for one file."""

    file: str
    """Path relative to the destination."""
    action: str
    """'present' (already verified), 'copied' (from the mirror) or 'downloaded'."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def select(only: Iterable[str] | None) -> list[Source]:
    """The sources named by `only`: task names (their files plus extras), folders, or file paths."""
    table = sources()
    if only is None:
        return list(table)
    wanted: list[str] = []
    for name in only:
        name = name.strip().rstrip("/")
        if not name:
            continue
        if name in TASKS or name in EXTRA_FILES:
            files = TASKS[name].files if name in TASKS else ()
            wanted += [*files, *EXTRA_FILES.get(name, ())]
        elif any(s.file == name or s.file.startswith(name + "/") for s in table):
            wanted += [s.file for s in table if s.file == name or s.file.startswith(name + "/")]
        else:
            known = sorted({*TASKS, *EXTRA_FILES} - {"jsonl"})
            raise ConfigError(
                f"--only: {name!r} is no task, folder or file of sources.tsv; tasks: {', '.join(known)}"
            )
    keep = set(wanted)
    return [s for s in table if s.file in keep]


def _verify(tmp: Path, src: Source, origin: str) -> None:
    """Raise (after deleting tmp) unless tmp holds exactly the pinned bytes."""
    got = sha256_of(tmp)
    if got != src.sha256:
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"sha256 mismatch: expected {src.sha256}, got {got} (from {origin}); "
            "the copy is corrupt or not the pinned version",
            where=src.file,
        )


def _tmp_beside(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:  # mkstemp makes it owner-only (0600): give the data file the mode a plain open() would (a shared dir)
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    return Path(name)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _copy(src: Source, mirror: Path, target: Path) -> None:
    origin = mirror / src.file
    if not origin.is_file():
        raise DataError(f"not in the mirror {mirror} (expected at {origin})", where=src.file)
    tmp = _tmp_beside(target)
    try:
        shutil.copyfile(origin, tmp)
        _verify(tmp, src, str(origin))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


OFFLINE = (
    "without network, copy the files from a data mirror (a folder laid out like the data dir): "
    "harness-fetch --mirror DIR or HARNESS_DATA_MIRROR=DIR"
)
"""The way out of a failed download, named in its error."""


def _download(src: Source, target: Path, base_url: str, timeout: float, retries: int) -> None:
    url = source_url(src, base_url)
    tmp = _tmp_beside(target)
    try:
        for attempt in range(1, retries + 1):
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp, tmp.open("wb") as out:
                    shutil.copyfileobj(resp, out, 1 << 20)
                break
            except urllib.error.HTTPError as e:
                # 4xx will not change on retry (wrong path or commit); 5xx and 429 may.
                if (e.code < 500 and e.code != 429) or attempt == retries:
                    raise DataError(
                        f"download failed: HTTP {e.code} {e.reason} for {url}; {OFFLINE}", where=src.file
                    ) from None
            except (
                urllib.error.URLError,
                OSError,
                http.client.HTTPException,
            ) as e:  # incl. timeouts, cut streams
                if attempt == retries:
                    reason = getattr(e, "reason", e)
                    raise DataError(
                        f"download failed after {retries} tries: {reason} ({url}); {OFFLINE}", where=src.file
                    ) from None
            time.sleep(min(BACKOFF_S * 2 ** (attempt - 1), 10.0))
        _verify(tmp, src, url)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def ensure_data(
    dest: str | Path | None = None,
    mirror: str | Path | None = None,
    only: Iterable[str] | None = None,
    *,
    base_url: str = RAW_BASE,
    timeout: float = TIMEOUT_S,
    retries: int = RETRIES,
    log: bool = False,
) -> list[FetchResult]:
    """Make `dest` hold verified copies of the selected pinned files (all when `only` is None).

    mirror: a folder laid out like dest (e.g. ../shared/data) to copy from instead of
    downloading; with a mirror nothing is downloaded. only: task names, folders or file paths.
    base_url: where downloads come from (GitHub raw by default; any server with the same
    <repo>/<commit>/<path> layout works). Raises DataError on any missing or mismatching file.
    """
    root = Path(dest).expanduser() if dest is not None else default_data_dir()
    mirror_dir = Path(mirror).expanduser() if mirror not in (None, "") else None
    if mirror_dir is not None and not mirror_dir.is_dir():
        raise DataError("mirror folder not found", where=str(mirror_dir))
    results = []
    for src in select(only):
        target = root / src.file
        if target.is_file() and target.stat().st_size == src.size and sha256_of(target) == src.sha256:
            action = "present"
        else:
            try:
                if mirror_dir is not None:
                    _copy(src, mirror_dir, target)
                    action = "copied"
                else:
                    _download(src, target, base_url, timeout, retries)
                    action = "downloaded"
            except OSError as e:  # read-only or full destination, unreadable mirror file
                raise DataError(f"cannot write {target}: {e.strerror or e}", where=src.file) from None
        results.append(FetchResult(src.file, action))
        if log:
            print(f"{action:>10}  {target}", flush=True)
    return results


def cli_mirror(arg: str | None) -> str | None:
    """Where the CLI copies from: --mirror, else $HARNESS_DATA_MIRROR (as setup.sh and the configs
    read it), else None: download. An explicit `--mirror ''` downloads even when the variable is set."""
    if arg is not None:
        return arg or None
    return os.environ.get("HARNESS_DATA_MIRROR") or None


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry (also the `harness-fetch` script). Exit 0 when every file is verified, 2 on error."""
    parser = argparse.ArgumentParser(prog="python -m harness.data.fetch", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dest", default=None, help="data directory (default: $HARNESS_DATA_DIR or ~/.cache/harness/data)"
    )
    parser.add_argument(
        "--mirror",
        default=None,
        help="offline mirror folder to copy from instead of downloading (default: $HARNESS_DATA_MIRROR)",
    )
    parser.add_argument(
        "--only", default=None, help="comma-separated task names, folders or files (default: all)"
    )
    parser.add_argument("--base-url", default=RAW_BASE, help=f"download base (default {RAW_BASE})")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per HTTP request")
    parser.add_argument("--retries", type=int, default=RETRIES, help="tries per file for network errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    args = parser.parse_args(argv)
    try:
        if args.retries < 1 or args.timeout <= 0:
            raise ConfigError("--retries must be >= 1 and --timeout > 0")
        only = args.only.split(",") if args.only else None
        results = ensure_data(
            args.dest,
            cli_mirror(args.mirror),
            only,
            base_url=args.base_url,
            timeout=args.timeout,
            retries=args.retries,
            log=not args.quiet,
        )
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"{len(results)} file(s) verified in {Path(args.dest or default_data_dir()).expanduser()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
