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


def unpack(data: str, dest: str) -> None:
    """Extract an archive made by `pack` so that its single top-level entry becomes `dest`."""
    import base64
    import io
    import tarfile

    raw = base64.b64decode(data)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as archive:
        members = archive.getmembers()
        if not members:
            raise ValueError("empty archive")
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
