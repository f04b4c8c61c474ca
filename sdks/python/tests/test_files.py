"""Files: read and write (bytes, text, streams), write many, list, exists, info, remove,
rename, make_dir, search, replace, permissions."""

from __future__ import annotations

import io

import pytest

import hybox
from conftest import Server


@pytest.fixture()
def sb(server: Server):  # type: ignore[no-untyped-def]
    with hybox.Sandbox.create() as s:
        yield s


def test_read_write(sb: hybox.Sandbox) -> None:
    sb.files.write("/d/t.txt", "héllo\n")
    assert sb.files.read("/d/t.txt") == "héllo\n"
    blob = bytes(range(256)) * 1024
    sb.files.write("/d/b.bin", blob, mode=600)
    assert sb.files.read_bytes("/d/b.bin") == blob
    assert sb.files.info("/d/b.bin").mode == 600
    sb.files.write("/d/s.bin", io.BytesIO(blob))
    assert b"".join(sb.files.stream("/d/s.bin", chunk_size=4096)) == blob
    with pytest.raises(hybox.NotFoundError) as e:
        sb.files.read("/d/missing")
    assert e.value.code == "FILE_NOT_FOUND"


def test_write_many_list_search(sb: hybox.Sandbox) -> None:
    sb.files.write_many([
        hybox.WriteEntry("/p/a.py", "a = 1\n"),
        hybox.WriteEntry("/p/q/b.py", b"b = 2\n"),
        hybox.WriteEntry("/p/c.txt", "c"),
    ])
    names = sorted(f.path for f in sb.files.list("/p"))
    assert names == ["/p/a.py", "/p/c.txt", "/p/q"]
    deep = sorted(f.path for f in sb.files.list("/p", depth=2))
    assert "/p/q/b.py" in deep
    found = sorted(f.path for f in sb.files.search("/p", "**/*.py"))
    assert found == ["/p/a.py", "/p/q/b.py"]
    kinds = {f.path: f.type for f in sb.files.list("/p")}
    assert kinds["/p/q"] == "directory" and kinds["/p/a.py"] == "file"


def test_exists_info_remove_rename_make_dir(sb: hybox.Sandbox) -> None:
    sb.files.make_dir("/m/n/o")
    assert sb.files.info("/m/n").type == "directory"
    sb.files.write("/m/n/o/f", "x")
    assert sb.files.exists("/m/n/o/f") and not sb.files.exists("/m/zz")
    info = sb.files.info("/m/n/o/f")
    assert info.size == 1 and info.type == "file"
    sb.files.rename("/m/n/o/f", "/m/g")
    assert sb.files.read("/m/g") == "x" and not sb.files.exists("/m/n/o/f")
    sb.files.write("/m/h", "y")
    with pytest.raises(hybox.ConflictError) as e:
        sb.files.rename("/m/g", "/m/h")
    assert e.value.code == "FILE_EXISTS"
    sb.files.remove("/m/g")
    assert not sb.files.exists("/m/g")
    sb.files.remove("/m")  # a directory tree
    assert not sb.files.exists("/m")
    sb.files.remove("/m")  # a missing path is not an error


def test_replace_permissions(sb: hybox.Sandbox) -> None:
    sb.files.write("/r.txt", "one two one")
    assert sb.files.replace("/r.txt", "one", "1") == 2
    assert sb.files.read("/r.txt") == "1 two 1"
    sb.files.write("/r2.txt", "aaa")
    assert sb.files.replace_many({"/r.txt": ("two", "2"), "/r2.txt": ("a", "b")}) == {"/r.txt": 1, "/r2.txt": 3}
    sb.files.set_permissions("/r.txt", mode=640)
    assert sb.files.info("/r.txt").mode == 640
