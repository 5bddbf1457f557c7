"""Pure logic: output capture, quoting, the editor, bwrap, pasta and runtime command lines, staging,
the tool registry and the image builder."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from containers.apptainer import instance_start_argv, instance_stop_argv, server_exec_argv
from containers.bwrap import BwrapLayout, build_argv
from containers.docker import remove_argv, run_argv
from containers.identity import Staging
from containers.images.builder import ImageBuilder, ImageSpec
from containers.local import host_paths_for_server
from containers.netns import pasta_argv
from containers.server.wire import parse_address
from containers.spec import ReadOnlyBind, ResourceLimits, SandboxSpec
from containers.tools.bash import ansi_c_quote
from containers.tools.capture import OutputCapture
from containers.tools.editor import FileEditor
from containers.tools.registry import TOOLS, openai_tools


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=2, max_value=500))
def test_capture_keeps_head_and_tail_and_counts_the_rest(chunks: list[bytes], limit: int) -> None:
    capture = OutputCapture(limit)
    for chunk in chunks:
        capture.feed(chunk)
    data = b"".join(chunks)
    assert capture.total == len(data)
    held = len(data) - capture.dropped
    assert held <= limit
    if capture.dropped == 0:
        assert capture.text() == data.decode("utf-8", "replace")
    else:
        assert f"{capture.dropped} bytes omitted" in capture.text()
    recent = min(5, limit // 2)
    if len(data) >= recent:
        assert capture.tail(recent) == data[len(data) - recent :]


@settings(max_examples=40, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60)
)
def test_ansi_c_quote_round_trips_through_bash(text: str) -> None:
    quoted = ansi_c_quote(text)
    assert "\n" not in quoted and "\r" not in quoted
    out = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, timeout=10).stdout
    assert out.decode() == text


@given(
    st.lists(st.text(alphabet="abc xyz\n", max_size=8), min_size=1, max_size=8),
    st.text(alphabet="abc", min_size=1, max_size=4),
    st.text(alphabet="XYZ\n", max_size=6),
)
def test_editor_str_replace_then_undo_restores_the_file(
    tmp_path_factory: pytest.TempPathFactory, parts, old, new
) -> None:
    root = tmp_path_factory.mktemp("edit")
    original = "".join(parts)
    (root / "f.txt").write_text(original)
    editor = FileEditor(str(root))
    result = editor("str_replace", "f.txt", old_str=old, new_str=new)
    count = original.count(old)
    assert result.error == (count != 1)
    if count == 1:
        assert (root / "f.txt").read_text() == original.replace(old, new)
        assert not editor("undo_edit", "f.txt").error
    assert (root / "f.txt").read_text() == original


def test_editor_insert_view_and_errors(tmp_path: Path) -> None:
    editor = FileEditor(str(tmp_path))
    assert not editor("create", "a.txt", file_text="one\ntwo\n").error
    assert editor("create", "a.txt", file_text="again").error
    assert not editor("insert", "a.txt", insert_line=1, new_str="one and a half").error
    assert (tmp_path / "a.txt").read_text() == "one\none and a half\ntwo\n"
    assert editor("insert", "a.txt", insert_line=9, new_str="x").error
    assert "     3\ttwo" in editor("view", "a.txt").output
    assert "a.txt" in editor("view", str(tmp_path)).output
    assert editor("view", "missing.txt").error
    assert editor("undo_edit", "never-edited.txt").error


def _layout(**overrides: object) -> BwrapLayout:
    base = dict(
        root="/",
        workspace="/srv/sb/ws",
        workdir="/workspace",
        control_dir="/srv/sb/control",
        control_target="/run/farm",
        hostname="sandbox-x",
        hide=["/srv/sb"],
        info_fd=5,
    )
    return BwrapLayout(**{**base, **overrides})  # type: ignore[arg-type]


def test_bwrap_argv_isolates_by_default() -> None:
    argv = build_argv("/usr/bin/bwrap", _layout(), ["server"])
    assert argv[:5] == ["/usr/bin/bwrap", "--unshare-all", "--new-session", "--cap-drop", "ALL"]
    assert "--share-net" not in argv and "--die-with-parent" in argv and "--setenv" not in argv
    joined = " ".join(argv)
    assert "--ro-bind /usr /usr" in joined and "--symlink usr/bin /bin" in joined
    assert "--bind /srv/sb/ws /workspace" in joined and "--bind /srv/sb/control /run/farm" in joined
    assert "--tmpfs /srv/sb" in joined and "--proc /proc" in joined and "--tmpfs /tmp" in joined
    assert joined.index("--tmpfs /srv/sb") < joined.index("--bind /srv/sb/ws")
    assert "--proc /proc --dev /dev" in joined and "--ro-bind /proc" not in joined
    assert argv[-2:] == ["--", "server"] and "--info-fd 5" in joined


def test_bwrap_argv_detached_unprivileged_and_staged() -> None:
    layout = _layout(die_with_parent=False, uid=1000, gid=1000, block_fd=7, tmp_size=1 << 20)
    layout.stage = lambda path: "/stage/" + path.strip("/").replace("/", "_")
    layout.hide = ["/root", "/srv/sb"]
    argv = build_argv("bwrap", layout, ["server"])
    joined = " ".join(argv)
    assert "--share-net" not in argv and "--die-with-parent" not in argv
    assert "--uid 1000 --gid 1000" in joined and "--block-fd 7" in joined
    assert "--size 1048576 --tmpfs /tmp" in joined
    assert "--bind /stage/srv_sb_ws /workspace" in joined and "--ro-bind /root" not in joined
    assert "--dir /root" in joined or not os.path.isdir("/root")


SPEC = SandboxSpec(
    image="/images/math.sif",
    limits=ResourceLimits(max_processes=100, address_space_mb=2048, file_size_mb=10),
    ro_binds=[ReadOnlyBind(source="/data", target="/data")],
    env={"A": "1"},
)


def test_apptainer_command_lines() -> None:
    argv = instance_start_argv("apptainer", SPEC, "farm-1", "/sb/ws", "/sb/control", {"A": "1"})
    joined = " ".join(argv)
    for flag in ("--fakeroot", "--containall", "--network none", "--cleanenv", "--pwd /workspace"):
        assert flag in joined
    assert "--bind /sb/ws:/workspace" in joined and "--bind /data:/data:ro" in joined
    assert argv[-2:] == ["/images/math.sif", "farm-1"] and "--env A=1" in joined
    networked = instance_start_argv("apptainer", SPEC.model_copy(update={"network": True}), "n", "w", "c", {})
    assert "--network" not in networked
    exec_argv = server_exec_argv("apptainer", "farm-1", SPEC)
    assert exec_argv[:3] == ["apptainer", "exec", "instance://farm-1"] and exec_argv[3] == "python3"
    config = json.loads(exec_argv[-1])
    assert config["socket"] == "/run/farm/exec.sock" and config["limits"]["max_processes"] == 100
    assert instance_stop_argv("apptainer", "farm-1") == ["apptainer", "instance", "stop", "--force", "farm-1"]
    with pytest.raises(ValueError):
        instance_start_argv("apptainer", SandboxSpec(), "x", "w", "c", {})


def test_docker_command_lines() -> None:
    argv = run_argv(
        "docker", SPEC.model_copy(update={"image": "math:1"}), "farm-1", "/sb/ws", "/sb/c", {"A": "1"}
    )
    joined = " ".join(argv)
    for flag in ("--network none", "--pids-limit 100", "--memory 2048m", "--cap-drop ALL", "--rm", "--init"):
        assert flag in joined
    assert f"--ulimit fsize={10 << 20}:{10 << 20}" in joined and "--volume /data:/data:ro" in joined
    assert "--volume /sb/c:/run/farm" in joined and argv[argv.index("math:1") + 1] == "python3"
    assert remove_argv("docker", "farm-1") == ["docker", "rm", "--force", "farm-1"]


def test_wire_addresses() -> None:
    assert parse_address("unix:/a/b.sock") == ("unix", "/a/b.sock")
    assert parse_address("tcp:127.1.0.1:80") == ("tcp", ("127.1.0.1", 80))
    with pytest.raises(ValueError):
        parse_address("http://x")


def test_pasta_argv_forwards_nothing_but_the_granted_ports() -> None:
    as_root = pasta_argv("pasta", 42, "/sb/pasta.pid", [8000, 8001], netns_fd=9, userns_fd=10)
    joined = " ".join(as_root)
    for flag in ("--no-map-gw", "-t none", "-u none", "-U none", "-T 8000,8001", "--config-net"):
        assert flag in joined
    assert as_root[-4:] == ["--userns", "/proc/self/fd/10", "--netns", "/proc/self/fd/9"]
    assert "--runas" not in as_root  # started as the sandbox's user, never kept as root
    rootless = pasta_argv("pasta", 42, "/sb/pasta.pid", [])
    assert "-T none" in " ".join(rootless) and rootless[-1] == "42"


def test_staging_maps_each_source_once() -> None:
    staging = Staging("/run/stage")
    assert staging.stage("/root/a") == "/run/stage/0" and staging.stage("/srv/b") == "/run/stage/1"
    assert staging.stage("/root/a") == "/run/stage/0" and staging.sources == ["/root/a", "/srv/b"]


def test_server_paths_never_expose_a_masked_directory_itself() -> None:
    paths = host_paths_for_server(["/root", "/home"])
    assert "/tmp" not in paths and "/root" not in paths and "/" not in paths
    for path in paths:
        assert path.startswith(("/tmp/", "/root/", "/home/"))


def test_registry_exposes_openai_function_schemas() -> None:
    tools = openai_tools(["python", "bash", "editor", "think", "finish"])
    assert [t["function"]["name"] for t in tools] == ["python", "bash", "editor", "think", "finish"]
    for tool in tools:
        assert tool["type"] == "function" and tool["function"]["description"]
        params = tool["function"]["parameters"]
        assert params["type"] == "object" and "title" not in json.dumps(params)
    bash = tools[1]["function"]["parameters"]
    assert bash["required"] == ["command"] and bash["properties"]["timeout"]["type"] == "number"
    editor = tools[2]["function"]["parameters"]["properties"]
    assert editor["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert editor["view_range"]["type"] == "array"
    assert openai_tools(["ipython"])[0]["function"]["name"] == "python"
    with pytest.raises(KeyError):
        openai_tools(["nope"])
    assert set(TOOLS) == {"bash", "python", "editor", "think", "finish"}


IMAGE = ImageSpec(name="math", base_image="python:3.11-slim", pip_packages=["sympy>=1.12"], env={"K": "a b"})


def test_image_templates_render(tmp_path: Path) -> None:
    dockerfile = ImageBuilder("docker", tmp_path, binary="docker").render(IMAGE)
    assert dockerfile.startswith("FROM python:3.11-slim\n")
    assert "'ptyprocess>=0.7'" in dockerfile and "'sympy>=1.12'" in dockerfile and 'K="a b"' in dockerfile
    definition = ImageBuilder("apptainer", tmp_path, binary="apptainer").render(IMAGE)
    assert definition.startswith("Bootstrap: docker\nFrom: python:3.11-slim\n")
    assert "%post" in definition and "export K='a b'" in definition and "'jupyter_client>=8'" in definition


def test_image_cache_keys(tmp_path: Path) -> None:
    builder = ImageBuilder("apptainer", tmp_path, binary="apptainer")
    key = builder.cache_key(IMAGE, "versioned")
    assert key == builder.cache_key(IMAGE, "versioned")
    assert key != builder.cache_key(IMAGE.model_copy(update={"base_image": "python:3.12-slim"}), "versioned")
    assert key != builder.cache_key(IMAGE.model_copy(update={"setup": ["echo 1"]}), "versioned")
    assert builder.cache_key(IMAGE, "scratch") != builder.cache_key(IMAGE, "scratch")
    lock = tmp_path / "requirements.lock"
    lock.write_text("sympy==1.12\n")
    locked = IMAGE.model_copy(update={"lockfile": str(lock)})
    lock_key = builder.cache_key(locked, "lock")
    assert lock_key == builder.cache_key(locked.model_copy(update={"setup": ["echo 1"]}), "lock")
    lock.write_text("sympy==1.13\n")
    assert builder.cache_key(locked, "lock") != lock_key
    ref = builder.image_ref(IMAGE, key)
    assert ref == str(tmp_path / f"math-{key}.sif")
    assert builder.build_argv(Path("/b/image.def"), ref, Path("/b"))[:3] == [
        "apptainer",
        "build",
        "--fakeroot",
    ]
    docker = ImageBuilder("docker", tmp_path, binary="docker")
    assert docker.image_ref(IMAGE, "k") == "rollout-farm/math:k"
    assert "--tag" in docker.build_argv(Path("/b/Dockerfile"), "rollout-farm/math:k", Path("/b"))
