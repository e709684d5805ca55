"""The set-up the README and the docs promise holds for a newcomer: the system packages the
test tiers' page names are the ones ``.ci/run`` installs (python3-venv, Slurm and munge among
them), and every command a shipped plan's header tells one to run exists after the README's
install."""

from __future__ import annotations

import re
import shlex

from conftest import PLANS, ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
TIERS = (ROOT / "docs" / "contributing" / "tests.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _apt_packages(text: str) -> set[str]:
    """The packages of the first ``apt-get install`` command in ``text`` (line breaks joined)."""
    joined = text.replace("\\\n", " ")
    m = re.search(r"apt-get install ([^\n`]*)", joined)
    assert m, "no apt-get install line"
    return {w for w in m.group(1).split() if not w.startswith(("-", ">"))}


def test_the_docs_name_every_system_package_ci_installs() -> None:
    block = TIERS[TIERS.index("```sh\napt-get install") :]
    named = _apt_packages(block)
    assert {"python3-venv", "slurm-wlm", "munge"} <= named
    assert named == _apt_packages(CI)


def test_the_readme_commands_install_into_the_venv_they_run_from() -> None:
    start = README.index("## Two commands")
    two = README[start : README.index("\n## ", start)]
    commands = re.findall(r"^(python3 -m venv .*|\.venv/bin/.*)$", two, re.M)
    assert len(commands) >= 3
    for line in commands:
        for part in line.split("&&"):
            program = shlex.split(part)[0]
            assert program in ("python3", ".venv/bin/pip") or program.startswith(".venv/bin/")


def test_a_plan_header_runs_only_what_the_readme_install_made() -> None:
    for plan in sorted(PLANS.glob("*.toml")):
        made = {".venv/bin/"}  # the README's install
        for line in plan.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#   "):
                continue
            command = line[4:].split("  #")[0]
            for part in command.split("&&"):
                program = shlex.split(part)[0]
                venv = re.match(r"python3 -m venv (\S+)", part.strip())
                if venv:
                    made.add(venv.group(1).rstrip("/") + "/bin/")
                    continue
                assert any(program.startswith(m) for m in made), (
                    f"{plan.name}: `{program}` is not on PATH after the README's install; "
                    f"write it as .venv/bin/{program}"
                )
