"""File transfer for the `put` / `get` ops: a file or directory travels as a base64 tar archive."""

from __future__ import annotations

import os


def pack(path: str) -> str:
    """Tar `path` (file or directory) with its base name as the single top-level entry."""
    import base64
    import io
    import tarfile

    if not os.path.exists(path):
        raise FileNotFoundError(path)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(path, arcname=os.path.basename(path.rstrip("/")) or ".")
    return base64.b64encode(buffer.getvalue()).decode()


def unpack(data: str, dest: str, links: bool = True) -> None:
    """Extract an archive made by `pack` so that its single top-level entry becomes `dest`. With
    `links` False (the host receiving from a sandbox) only files and directories are extracted: a link
    would be followed by whoever reads the tree on the host later."""
    import base64
    import io
    import tarfile

    raw = base64.b64decode(data)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as archive:
        members = archive.getmembers()
        if not members:
            raise ValueError("empty archive")
        if not (members[0].isdir() or members[0].isfile()):
            raise ValueError(
                f"{members[0].name} is a link or a special file: only files and directories are copied"
            )
        # Links never leave the archive: on the host a later reader would follow them.
        members = [m for m in members if m.isdir() or m.isfile()]
        top = members[0].name.split("/")[0]
        for member in members:
            parts = member.name.split("/")
            if parts[0] != top:
                raise ValueError("archive must have one top-level entry")
            member.name = "/".join(parts[1:])
        parent = os.path.dirname(dest.rstrip("/")) or "/"
        os.makedirs(parent, exist_ok=True)
        if members[0].isdir():
            os.makedirs(dest, exist_ok=True)
            archive.extractall(dest, members=[m for m in members if m.name], filter="data")
        else:
            source = archive.extractfile(members[0])
            assert source is not None
            with open(dest, "wb") as handle:
                handle.write(source.read())
            os.chmod(dest, members[0].mode & 0o777)
