"""`tvbod keygen --out DIR --name NAME`: create a CURVE key pair for the daemon or an adapter.

Writes `DIR/NAME.key` (the public key, mode 0644: hand it out) and `DIR/NAME.key_secret` (both
keys, mode 0600: it never leaves its host) with `zmq.auth.create_certificates`, and prints the
public key. Existing files are never overwritten. docs/security.md walks through the setup.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import zmq
import zmq.auth

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", type=Path, required=True,
                        help="directory for NAME.key and NAME.key_secret (created mode 0700)")
    parser.add_argument("--name", required=True,
                        help="key name, e.g. `server` or the adapter's name (1..64 of A-Z a-z 0-9 _ . -)")


def run(args: argparse.Namespace) -> int:
    if not zmq.has("curve"):
        print("tvbod keygen: this libzmq has no CURVE support", file=sys.stderr)
        return 1
    if not _NAME.fullmatch(args.name):
        print(f"tvbod keygen: --name {args.name!r} must be 1..64 of A-Z a-z 0-9 _ . - and not "
              "start with a dot", file=sys.stderr)
        return 2
    try:
        public_file, secret_file = create_key_pair(args.out, args.name)
    except OSError as exc:
        print(f"tvbod keygen: {exc}", file=sys.stderr)
        return 1
    public_file, secret_file = public_file.resolve(), secret_file.resolve()
    public, _ = zmq.auth.load_certificate(public_file)
    print(f"public key:  {public.decode()}\n"
          f"public file: {public_file}\n"
          f"secret file: {secret_file} (mode 0600; keep it on this host, never copy it elsewhere)\n"
          "\n"
          "For an adapter: copy the public file into the daemon's allowed_clients directory\n"
          "(security.curve.allowed_clients) and restart the daemon; run the adapter with\n"
          f"  --curve-secret {secret_file} --curve-server <the daemon's server .key file>\n"
          "For the daemon: set security.curve.server_secret_key to the secret file and give\n"
          "the public file to every adapter (--curve-server).")
    return 0


def create_key_pair(directory: Path, name: str) -> tuple[Path, Path]:
    """Write `directory/NAME.key` (0644) and `directory/NAME.key_secret` (0600); never overwrite.

    The pair is made in a private temporary directory inside `directory` and hard-linked into
    place, so the secret is never readable by others, not even briefly, and an existing file (or
    one created concurrently) makes it fail with `FileExistsError` and leave nothing behind."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    for f in (public, secret):
        if f.exists():
            raise _exists(f)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory))  # mode 0700
    try:
        made_public, made_secret = (Path(p) for p in zmq.auth.create_certificates(tmp, name))
        os.chmod(made_secret, 0o600)
        os.chmod(made_public, 0o644)
        _link(made_secret, secret)
        try:
            _link(made_public, public)
        except OSError:
            secret.unlink()
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return public, secret


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # atomic, and fails if dst exists
    except FileExistsError:
        raise _exists(dst) from None


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(f"{path} exists; refusing to overwrite a key (move it away first)")
