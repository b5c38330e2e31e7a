"""Checkpoint backup against a plain boto3 upload of the same bytes, on the embedded S3
server (SeaweedFS, as `gpulease up` runs it), all on this machine.

The data: 2,000 files making 2 GiB plus 4 files of 256 MiB (random bytes). In one run:
1. the baseline: boto3's transfer manager uploads every file (multipart over 64 MiB, 16 MiB
   parts, 8 at once: the backup's own settings) to a bucket of its own;
2. the first backup (no hash cache) to another bucket: its throughput ÷ the baseline's;
3. a re-run after 1 % of the bytes changed (whole small files rewritten): its time ÷ the
   first run's;
4. a restore with verification into a new directory, beside a plain boto3 download of the
   same objects (the baseline for restore).
Prints JSON with the issue's marks: backup ≥ 0.8 × the baseline's throughput; the re-run
≤ 10 % of the first run's time.

    python bench/backup.py [--small-files 2000] [--small-gib 2] [--big 4] [--big-mib 256]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from boto3.s3.transfer import TransferConfig, create_transfer_manager

from gpulease.agent import backup as engine
from gpulease.agent.backup import Target
from gpulease.drivers.seaweedfs import start_embedded_s3

CHUNK = 8 << 20


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            f.write(os.urandom(n))
            left -= n


def make_data(root: Path, small: int, small_bytes: int, big: int, big_bytes: int
              ) -> list[Path]:
    files = []
    each = small_bytes // small
    for i in range(small):
        d = root / f"shard-{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        files.append(d / f"part-{i:05d}.bin")
        write_random(files[-1], each)
    for i in range(big):
        files.append(root / f"model-{i}.safetensors")
        write_random(files[-1], big_bytes)
    return files


def manager(target: Target) -> object:
    return create_transfer_manager(target.client(8), TransferConfig(
        multipart_threshold=engine.MULTIPART_AT, multipart_chunksize=engine.PART,
        max_concurrency=8, use_threads=True))


def plain_upload(target: Target, root: Path, files: list[Path]) -> float:
    started = time.monotonic()
    m = manager(target)
    futures = [m.upload(str(f), target.bucket, f"plain/{f.relative_to(root).as_posix()}")  # type: ignore[attr-defined]
               for f in files]
    for fut in futures:
        fut.result()
    m.shutdown()  # type: ignore[attr-defined]
    return time.monotonic() - started


def plain_download(target: Target, root: Path, files: list[Path], dest: Path) -> float:
    started = time.monotonic()
    m = manager(target)
    futures = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        futures.append(m.download(target.bucket, f"plain/{rel}", str(dest / rel)))  # type: ignore[attr-defined]
    for fut in futures:
        fut.result()
    m.shutdown()  # type: ignore[attr-defined]
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small-files", type=int, default=2000)
    ap.add_argument("--small-gib", type=float, default=2.0)
    ap.add_argument("--big", type=int, default=4)
    ap.add_argument("--big-mib", type=int, default=256)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpulease-bench-backup-"))
    s3 = start_embedded_s3(work / "s3")
    try:
        source = work / "checkpoints"
        files = make_data(source, args.small_files, int(args.small_gib * 2**30), args.big,
                          args.big_mib << 20)
        total = sum(f.stat().st_size for f in files)
        base = Target(endpoint=s3.url, bucket="plain", access_key_id=s3.access_key,
                      secret_access_key=s3.secret_key)
        ours = Target(endpoint=s3.url, bucket="backups", access_key_id=s3.access_key,
                      secret_access_key=s3.secret_key, prefix="backups/node-1")
        for t in (base, ours):
            t.client(2).create_bucket(Bucket=t.bucket)
        plain_s = plain_upload(base, source, files)
        cache = work / "hash-cache.json"
        first = engine.backup(source, ours, cache=cache)
        small_each = int(args.small_gib * 2**30) // args.small_files
        changed = files[:max(1, round(0.01 * total / small_each))]  # 1 % of the bytes
        for f in changed:
            write_random(f, f.stat().st_size)
        rerun = engine.backup(source, ours, cache=cache)
        restored = work / "restored"
        back = engine.restore(ours, rerun.snapshot_id, restored)
        plain_back_s = plain_download(base, source, files, work / "plain-restored")
        mb = total / 1e6
        result = {
            "bytes": total, "files": len(files),
            "baseline_plain_boto3_upload": {"seconds": round(plain_s, 2),
                                            "mb_per_s": round(mb / plain_s, 1)},
            "backup_first_run": {"seconds": first.seconds,
                                 "mb_per_s": round(mb / first.seconds, 1),
                                 "uploaded_bytes": first.bytes_uploaded},
            "backup_rerun_1pct_changed": {
                "seconds": rerun.seconds, "changed_files": len(changed),
                "changed_bytes": sum(f.stat().st_size for f in changed),
                "uploaded_bytes": rerun.bytes_uploaded},
            "restore_verified": {"seconds": back.seconds,
                                 "mb_per_s": round(mb / back.seconds, 1)},
            "baseline_plain_boto3_download": {"seconds": round(plain_back_s, 2),
                                              "mb_per_s": round(mb / plain_back_s, 1)},
        }
        ratio = (mb / first.seconds) / (mb / plain_s)
        result["marks"] = {
            "backup_vs_plain_throughput": round(ratio, 3),
            "backup_at_least_0.8x_plain": ratio >= 0.8,
            "rerun_share_of_first": round(rerun.seconds / first.seconds, 3),
            "rerun_at_most_10pct": rerun.seconds <= 0.10 * first.seconds,
        }
        print(json.dumps(result, indent=2))
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
