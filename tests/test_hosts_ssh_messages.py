"""What an operator reads when an SSH host cannot be used, against a real sshd: a changed host
key (refused as a possible attack, both fingerprints, the ssh-keygen -R to run) apart from an
unknown one, the HostName and Port really dialled (from the SSH config, not the alias or 22),
"not an SSH server" for a port where HTTP answers, and advice that can work for a config that
turns host-key checks off. Each message is printed; where it gives a command, the test runs
that command and checks that it does what the message says."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest
from conftest import ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)

from specbench_tui.errors import InputError
from specbench_tui.hosts.ssh import SshConnectError, SshConnection, SshRefused

pytestmark = pytest.mark.system

FAKE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def fingerprint(key_line: str) -> str:
    return asyncssh.import_public_key(key_line).get_fingerprint()


async def refused(ssh: SshConnection) -> str:
    try:
        with pytest.raises(SshConnectError) as info:
            await ssh.run("true")
    finally:
        await ssh.close()
    assert isinstance(info.value, InputError)
    print(f"\n[message] {info.value}")
    return str(info.value)


def config_with(sshd: Sshd, tmp_path: Path, text: str) -> Path:  # noqa: F811
    path = tmp_path / "ssh_config"
    path.write_text(text + "\n" + sshd.config.read_text())
    return path


async def test_changed_host_key_is_refused_with_both_fingerprints(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {FAKE_KEY}\n")
    ssh = SshConnection("sbtest", **{**sshd.connect_args(), "known_hosts": known})  # type: ignore[arg-type]
    with pytest.raises(SshRefused):
        await ssh.run("true")
    msg = await refused(SshConnection("sbtest", **{**sshd.connect_args(), "known_hosts": known}))  # type: ignore[arg-type]
    assert msg.startswith(f"HOST KEY CHANGED for sbtest (127.0.0.1 port {sshd.port}): ")
    assert fingerprint(sshd.host_pub) in msg and fingerprint(FAKE_KEY) in msg
    assert "intercepting" in msg and "not in" not in msg
    # the command it gives removes exactly the old key
    keygen = re.search(r"`(ssh-keygen [^`]+)`", msg)
    assert keygen is not None
    subprocess.run(shlex.split(keygen.group(1)), check=True, capture_output=True)
    assert FAKE_KEY not in known.read_text()
    assert f"`ssh -F {sshd.config} sbtest`" in msg


async def test_unknown_host_key_names_the_file_and_the_presented_key(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    msg = await refused(
        SshConnection("sbtest", **{**sshd.connect_args(), "known_hosts": empty})  # type: ignore[arg-type]
    )
    assert msg.startswith(f"host key of sbtest (127.0.0.1 port {sshd.port}) is not in {empty} ")
    assert fingerprint(sshd.host_pub) in msg and "CHANGED" not in msg
    assert f"connect once with `ssh -F {sshd.config} sbtest`" in msg


async def test_refused_port_is_the_configs_port(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    config = config_with(sshd, tmp_path, f"Host gone\n  HostName 127.0.0.1\n  Port {port}\n")
    msg = await refused(SshConnection("gone", **{**sshd.connect_args(), "config": config}))  # type: ignore[arg-type]
    assert msg.startswith(f"gone (127.0.0.1 port {port}): connection refused: nothing listens on ")
    assert "config/22" not in msg and f"`ssh -F {config} gone`" in msg


async def test_unresolvable_hostname_is_named_with_its_alias(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    config = config_with(sshd, tmp_path, "Host nowhere\n  HostName nowhere.invalid\n")
    msg = await refused(SshConnection("nowhere", **{**sshd.connect_args(), "config": config}))  # type: ignore[arg-type]
    assert "cannot resolve host name 'nowhere.invalid' (the HostName of 'nowhere'" in msg


async def test_a_port_where_http_answers_is_not_an_ssh_server(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    http = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        msg = await refused(SshConnection(f"127.0.0.1:{port}", **sshd.connect_args()))  # type: ignore[arg-type]
    finally:
        http.terminate()
        http.wait(10)
    assert msg.startswith(f"127.0.0.1 port {port}: not an SSH server: it answered 'HTTP/1.0 ")
    assert "(a web server)" in msg
    assert "Connection lost" not in msg


@pytest.mark.parametrize("known", ["/dev/null", "none"])
async def test_config_without_host_key_checks_gets_advice_that_works(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    known: str,
) -> None:
    """``UserKnownHostsFile /dev/null`` (or ``none``) with ``StrictHostKeyChecking no``: ssh
    would connect and record nothing; here the key is still checked, the connection refused,
    and the advice (put the key where it is read, with ssh-keyscan) lets the next one in."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host lax\n  HostName 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {sshd.client_key}\n"
        f"  UserKnownHostsFile {known}\n  StrictHostKeyChecking no\n"
    )
    args = {"config": config, "client_keys": [sshd.client_key], "use_agent": False}
    msg = await refused(SshConnection("lax", **args))  # type: ignore[arg-type]
    assert msg.startswith(f"host key of lax (127.0.0.1 port {sshd.port}) cannot be checked")
    assert "checks host keys regardless" in msg and fingerprint(sshd.host_pub) in msg
    scan = re.search(r"`(ssh-keyscan [^`]+) >> ~/\.ssh/known_hosts`", msg)
    assert scan is not None
    keys = subprocess.run(shlex.split(scan.group(1)), capture_output=True, text=True, check=True)
    (home / ".ssh" / "known_hosts").write_text(keys.stdout)
    config.write_text(config.read_text().replace(f"  UserKnownHostsFile {known}\n", ""))
    ssh = SshConnection("lax", **args)  # type: ignore[arg-type]
    try:
        assert (await ssh.run("echo in")).stdout == "in\n"
    finally:
        await ssh.close()


def test_changed_host_key_ends_a_campaign_with_one_line(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {FAKE_KEY}\n")
    config = tmp_path / "ssh_config"
    config.write_text(sshd.config.read_text().replace(str(sshd.known_hosts), str(known)))
    model = tmp_path / "model"
    model.mkdir()
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[campaign]\nname = "keys"\n[hosts.box]\nssh = "sbtest"\ngpus = 1\nservices = "process"\n'
        f'workdir = "{tmp_path / "w"}"\n[server]\npython = "{sys.executable}"\n'
        f'model = "{model}"\n[configs.ar]\n[matrix]\nconfigs = ["ar"]\ntp = [1]\n'
        '[workloads.single]\nkind = "single"\nprompts = ["chat"]\nsamples = 1\nmax_tokens = [8]\n'
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(tmp_path / "res"),
            "--ssh-config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    print(f"\n[message] {proc.stderr.strip()}")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("specbench-tui: HOST KEY CHANGED for sbtest (127.0.0.1 port ")
