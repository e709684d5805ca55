"""The one entry point: parses arguments and picks console, headless, dry-run, attach or report.

Input problems end with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from specbench_tui.errors import (
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    InputError,
)
from specbench_tui.hosts.options import HostOptions
from specbench_tui.stdout import is_closed_pipe, silence

DEMO_PLAN = Path("plans/demo.toml")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_INPUT, f"specbench-tui: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="specbench-tui",
        description="Run a speculative-decoding benchmark campaign from a TOML plan.",
    )
    from specbench_tui import __version__

    p.add_argument("--version", action="version", version=f"specbench-tui {__version__}")
    p.add_argument(
        "plan",
        nargs="*",
        metavar="PLAN | URL",
        help="plan file (default: plans/demo.toml); or the addresses of running servers "
        "(http://HOST:PORT ..., the first the baseline): a campaign with no plan file, whose "
        "plan is written beside its results",
    )
    one = p.add_argument_group("servers by address (specbench-tui URL [URL ...])")
    one.add_argument("--prompts", metavar="SETS", help="prompt sets, comma-separated (chat)")
    one.add_argument("--samples", metavar="N", type=int, help="prompts per set (8)")
    one.add_argument("--max-tokens", metavar="N,..", help="output lengths (256)")
    one.add_argument("--repeats", metavar="N", type=int, help="repeats of each prompt (3)")
    one.add_argument("--temperature", metavar="T", type=float, help="sampling temperature (0)")
    one.add_argument("--tp", metavar="N", type=int, help="the servers' TP size (1)")
    one.add_argument("--levels", metavar="N,..", help="also a concurrency sweep at these levels")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="review the plan; touch no host")
    mode.add_argument("--headless", action="store_true", help="no console: one line per event")
    mode.add_argument(
        "--report",
        metavar="DIR",
        type=Path,
        nargs="+",
        help="render the report of DIR again; several DIRs: the campaigns side by side "
        "(comparison.md/.tex/.pdf in the first)",
    )
    mode.add_argument(
        "--cleanup",
        metavar="DIR",
        type=Path,
        help="stop every process a crashed run of the results in DIR left running on this "
        "machine, and say which (a run still going keeps its servers)",
    )
    mode.add_argument(
        "--attach",
        metavar="DIR",
        type=Path,
        help="open the console on the campaign in DIR: steer it while a process runs it "
        "(console or headless), browse it read-only once it has ended",
    )
    p.add_argument(
        "--send",
        nargs="+",
        metavar=("ACTION", "TARGET"),
        help="with --attach: send one command (pause, resume, skip, rerun, "
        "rerun_failed, abort, retry_group) instead of opening the console",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="with --dry-run: one JSON document; with --fail-on-regression: the gate's "
        "verdict as one JSON object",
    )
    p.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        type=float,
        help="with --report OLD NEW: exit 1 where NEW's speed-up, accept length or decode "
        "tok/s is below OLD's beyond noise and by more than PCT percent (a CI gate)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --dry-run: also reach every host and check it (its connection and host key, "
        "interpreters, models, ports, GPU telemetry); changes nothing there",
    )
    p.add_argument("--results", metavar="DIR", type=Path, help="results root instead of the plan's")
    p.add_argument(
        "--estimate-from",
        metavar="DIR",
        type=Path,
        help="take the estimate's constants (server start-ups, cell times) from the finished "
        "cells of this results directory (default: the newest results of this campaign)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over; the old results directory is moved aside, never deleted",
    )
    p.add_argument("--only", metavar="PATTERN", help="run only cells whose id or name matches")
    p.add_argument(
        "--rerun-failed",
        action="store_true",
        help="resume, and run again the cells that failed (every cell not yet done or "
        "skipped runs)",
    )
    p.add_argument(
        "--rerun",
        metavar="IDS",
        help="run these cells again, whatever their status (comma-separated cell ids)",
    )
    p.add_argument(
        "--sim", action="store_true", help="rehearse the plan on the embedded simulated host"
    )
    p.add_argument("--theme", metavar="NAME", help="console theme from themes/")
    p.add_argument(
        "--refresh",
        metavar="HZ",
        type=float,
        help="console repaints a second (default 20, the most; below 1 the clock and GPU "
        "lines slow down too): lower it over a slow link",
    )
    p.add_argument(
        "--plan-schema",
        action="store_true",
        help="print the plan format as a JSON Schema (docs/plan-format.md says it for people)",
    )
    p.add_argument(
        "--job",
        metavar="FILE",
        type=Path,
        help="with --headless, inside a batch job: run the service group and cells of "
        "the job file the campaign wrote (the job script passes it)",
    )
    HostOptions.add_arguments(p)
    return p


def _default_plan() -> Path:
    if DEMO_PLAN.exists():
        return DEMO_PLAN
    here = Path(__file__).resolve().parent
    for shipped in (here / "plans" / "demo.toml", here.parent / "plans" / "demo.toml"):
        if shipped.exists():  # a wheel carries the demo inside the package; a checkout beside it
            return shipped
    return DEMO_PLAN


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["prompts"]:  # specbench-tui prompts get|list: the standard prompt sets
        from specbench_tui.fetch_prompts import main as prompts_main

        return prompts_main(argv[1:])
    args: argparse.Namespace | None = None
    try:
        args = build_parser().parse_args(argv)  # --help and --version print too
        _plan_or_urls(args)
        code = _dispatch(args)
        sys.stdout.flush()  # a reader that left shows here, not in the interpreter's last flush
        return code
    except InputError as exc:
        _say(f"specbench-tui: {exc}")
        return exc.exit_code  # 2, or the status of a campaign that failed before it ran
    except KeyboardInterrupt:
        _say("specbench-tui: interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if is_closed_pipe(exc):  # `| head`: the reader left, as Unix tools take it
            silence()
            return EXIT_PIPE
        # A bug in this tool, never "some cells failed" (exit 1): say so, ask for a report,
        # and keep the traceback where the report can take it from (a console's stderr is
        # gone once the screen is restored).
        import traceback

        text = traceback.format_exc()
        sys.stderr.write(text)
        given = sys.argv[1:] if argv is None else argv
        campaign_dir = getattr(args, "campaign_dir", None)
        saved = _keep_traceback(text, given, campaign_dir)
        _remove_control_socket(campaign_dir)
        where = f"; the traceback is in {saved}" if saved else " with the traceback above"
        print(
            f"specbench-tui: internal error ({_innermost(exc)}): a bug in specbench-tui, "
            f"please report it{where}. What was measured is kept, and running the plan "
            "again resumes it",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def json_lines(doc: dict[str, Any]) -> list[str]:
    """One JSON document laid out a line per top-level key and a line per item of its lists
    (each group, each cell): ``jq`` reads it whole, ``head`` and ``grep`` see one item a line.
    Each line is encoded by the C encoder (``indent`` would take the pure-Python one, far
    slower on a plan of 10,000 groups)."""
    compact = {"separators": (",", ":")}
    out = ["{\n"]
    keys = list(doc)
    for n, key in enumerate(keys):
        value = doc[key]
        head = json.dumps(key, **compact) + ":"  # type: ignore[arg-type]
        end = ",\n" if n < len(keys) - 1 else "\n"
        if isinstance(value, list) and value:
            out.append(head + "[\n")
            items = [json.dumps(v, **compact) for v in value]  # type: ignore[arg-type]
            out += [item + ",\n" for item in items[:-1]] + [items[-1] + "\n"]
            out.append("]" + end)
        else:
            out.append(head + json.dumps(value, **compact) + end)  # type: ignore[arg-type]
    out.append("}\n")
    return out


def _say(line: str) -> None:
    """One line on stderr; none where stderr's reader has gone too."""
    try:
        print(line, file=sys.stderr)
    except BrokenPipeError:
        silence()


def _innermost(exc: BaseException) -> str:
    """The exception that went wrong, not the task group that carried it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _keep_traceback(text: str, argv: list[str], campaign_dir: Path | None) -> Path | None:
    """Write the traceback to ``internal-error-<UTC time>.txt`` in the campaign's results
    directory (beside what the run was doing), else in the system temp directory."""
    import platform
    import tempfile
    import time

    from specbench_tui import __version__

    name = time.strftime("internal-error-%Y%m%dT%H%M%SZ.txt", time.gmtime())
    head = (
        f"specbench-tui {__version__}, Python {platform.python_version()}, "
        f"{platform.platform()}\narguments: {argv!r}\n\n"
    )
    for where in (campaign_dir, Path(tempfile.gettempdir())):
        if where is None or not where.is_dir():
            continue
        try:
            (where / name).write_text(head + text, encoding="utf-8")
        except OSError:
            continue
        return where / name
    return None


def _remove_control_socket(campaign_dir: Path | None) -> None:
    """After an internal error: the run's control socket, which nothing will answer now (the
    close path was not reached); kept if another process listens there."""
    if campaign_dir is None:
        return
    import contextlib

    from specbench_tui.engine.control_socket import remove_stale
    from specbench_tui.results.layout import ResultsLayout

    # The traceback is what matters here; a socket left anyway is cleared by the next run.
    with contextlib.suppress(OSError):
        remove_stale(ResultsLayout(campaign_dir).control_socket, ours=True)


def _rebuild_views(root: Path) -> None:
    """After a report: the views brought up to date from the log and the parts, where no
    campaign runs in the directory (a run writes the whole views only now and then)."""
    import polars as pl

    from specbench_tui.engine.store import ResultsStore
    from specbench_tui.results.layout import ResultsLayout

    try:
        notices = ResultsStore.rebuild_views(ResultsLayout(root))
    except (OSError, pl.exceptions.PolarsError) as exc:  # the report stands; the views stay
        print(f"specbench-tui: views not rebuilt: {exc}", file=sys.stderr)
        return
    for text in notices or ():
        print(f"specbench-tui: {text}", file=sys.stderr)


def _cleanup(root: Path, *, quiet: bool) -> Any:
    """Stop what a crashed run of ``root`` left running here; each line said on stderr
    (``quiet``: nothing when nothing was left, as after ``--report``)."""
    from specbench_tui.hosts.cleanup import cleanup_results

    done = asyncio.run(cleanup_results(root))
    for line in done.lines:
        print(f"specbench-tui: {line}", file=sys.stderr)
    if not quiet:
        n = done.stopped
        print(
            f"specbench-tui: {root}: {n} process{'es' * (n != 1)} stopped"
            + ("; some could not be stopped" if done.failed else ""),
            file=sys.stderr,
        )
    return done


def _send(control: object, words: list[str]) -> int:
    """One command to a running campaign; a refusal is bad input (exit 2) with its reason."""
    from specbench_tui.engine.commands import Command

    action, target = words[0].replace("-", "_"), " ".join(words[1:]) or None
    try:
        command = Command.from_json({"action": action, "target": target, "by": "cli"})
    except ValueError as exc:
        raise InputError(str(exc)) from None
    reply = asyncio.run(control.send(command))  # type: ignore[attr-defined]
    if not reply.ok:
        raise InputError(reply.text)
    print(reply.text)
    return EXIT_OK


_ONE_LINE = ("prompts", "samples", "max_tokens", "repeats", "temperature", "tp", "levels")


def _plan_or_urls(args: argparse.Namespace) -> None:
    """``plan``: one plan file (a Path, or None), or running servers' addresses (``urls``)."""
    from specbench_tui.plan.one_line import is_url

    words: list[str] = args.plan
    args.urls = [w for w in words if is_url(w)]
    rest = [w for w in words if not is_url(w)]
    if args.urls and rest:
        raise InputError(f"give a plan file or server addresses, not both ({rest[0]})")
    if len(rest) > 1:
        raise InputError(f"one plan file at a time (got {', '.join(rest)})")
    args.plan = Path(rest[0]) if rest else None
    other = [f for f in ("report", "cleanup", "attach") if getattr(args, f) is not None]
    if args.urls and (other or args.plan_schema):
        flag = "--" + (other[0] if other else "plan-schema")
        raise InputError(f"{flag} takes no server addresses")
    knobs = [k for k in _ONE_LINE if getattr(args, k) is not None]
    if knobs and not args.urls:
        flag = "--" + knobs[0].replace("_", "-")
        raise InputError(f"{flag} goes with server addresses (specbench-tui URL ... {flag} ...)")


def _one_line_plan(args: argparse.Namespace) -> Path | None:
    """The one-line form's plan, written into the results root (``results/<name>.toml``):
    the file this run loads, and the one to run again or edit."""
    if not args.urls:
        return None
    from specbench_tui.plan.one_line import OneLine, plan_text

    def numbers(text: str | None, flag: str) -> tuple[int, ...] | None:
        if text is None:
            return None
        try:
            values = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise InputError(f"{flag} {text!r}: give whole numbers, comma-separated") from None
        return values or None

    given = {
        "prompts": tuple(x.strip() for x in args.prompts.split(",") if x.strip())
        if args.prompts
        else None,
        "samples": args.samples,
        "max_tokens": numbers(args.max_tokens, "--max-tokens"),
        "repeats": args.repeats,
        "temperature": args.temperature,
        "tp": args.tp,
        "levels": numbers(args.levels, "--levels"),
    }
    root = args.results or Path("results")
    form = OneLine(
        urls=tuple(args.urls),
        results=str(root),
        **{k: v for k, v in given.items() if v is not None},
    )
    text = plan_text(form)
    path = root / f"{form.name}.toml"
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise InputError(
            f"{path} differs from the plan the one-line form writes (edited?): run it with "
            f"specbench-tui {path}, or move it away"
        )
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(
        f"specbench-tui: the plan of this run is {path} (run it again or edit it)", file=sys.stderr
    )
    return path


def _check_flags(args: argparse.Namespace) -> None:
    """Flags that go only with others: one line (exit 2) before anything runs."""
    gate_pct = args.fail_on_regression
    if args.json and not args.dry_run and gate_pct is None:
        raise InputError("--json goes with --dry-run or --fail-on-regression")
    if gate_pct is not None and (args.report is None or len(args.report) != 2):
        raise InputError("--fail-on-regression goes with --report OLD NEW (two directories)")
    if gate_pct is not None and not gate_pct >= 0:
        raise InputError(f"--fail-on-regression {gate_pct:g}: give a percentage of 0 or more")
    if args.check and not args.dry_run:
        raise InputError("--check goes with --dry-run")
    if args.estimate_from is not None and (args.report or args.attach or args.cleanup):
        raise InputError("--estimate-from goes with a plan (a run or --dry-run)")


def _dispatch(args: argparse.Namespace) -> int:
    if args.plan_schema:
        return _plan_schema(args)
    _check_flags(args)
    if args.cleanup is not None:
        return _cleanup_only(args)
    if args.report is not None:
        return _report(args)
    if args.send and args.attach is None:
        raise InputError("--send goes with --attach RESULTS_DIR")
    _refresh(args)  # a rate out of range is said before anything opens
    if args.attach is not None:
        return _attach(args)

    from specbench_tui.plan.loader import load_plan
    from specbench_tui.results.layout import ResultsLayout

    plan = load_plan(args.plan or _one_line_plan(args) or _default_plan())
    results_root = args.results or Path(plan.spec.campaign.results)
    layout = ResultsLayout.for_campaign(results_root, plan.spec.campaign.name, sim=args.sim)
    args.campaign_dir = layout.root  # where an internal error keeps its traceback
    measured = None
    if args.dry_run or (args.headless and args.job is None):
        from specbench_tui.plan.estimate import host_speeds
        from specbench_tui.plan.measured import find_measured

        speeds = host_speeds(plan.spec, sim=args.sim)
        measured = find_measured(layout, args.estimate_from, speeds)
    if args.dry_run:
        return _dry_run(args, plan, layout, measured)

    rerun = tuple(x.strip() for x in (args.rerun or "").split(",") if x.strip())
    if args.job is not None and not args.headless:
        raise InputError("--job goes with --headless (it is how a batch job runs its group)")
    if not args.headless:
        return _console(args, plan, results_root, layout, rerun)
    return _headless(args, plan, layout, measured, rerun)


def _plan_schema(args: argparse.Namespace) -> int:
    from specbench_tui.plan.reference import json_schema

    if args.plan is not None:
        raise InputError("--plan-schema takes no plan")
    print(json.dumps(json_schema(), indent=2))
    return EXIT_OK


def _cleanup_only(args: argparse.Namespace) -> int:
    if args.plan is not None:
        raise InputError("--cleanup takes a results directory, not a plan")
    if not args.cleanup.is_dir():
        raise InputError(f"{args.cleanup}: no such results directory")
    done = _cleanup(args.cleanup, quiet=False)
    return EXIT_FAILED if done.failed else EXIT_OK


def _report(args: argparse.Namespace) -> int:
    """``--report DIR [DIR ...]``, and the regression gate where it is asked for."""
    from specbench_tui.report.render import render_comparison, render_report

    if args.plan is not None:
        raise InputError("--report takes results directories, not a plan")
    gate_pct = args.fail_on_regression
    reports = args.report
    written = render_report(reports[0]) if len(reports) == 1 else render_comparison(reports)
    for path in written:  # with the gate's JSON, stdout is that object alone
        print(path, file=sys.stderr if gate_pct is not None and args.json else sys.stdout)
    if len(reports) == 1:
        _rebuild_views(reports[0])
        _cleanup(reports[0], quiet=True)
    if gate_pct is None:
        return EXIT_OK
    from specbench_tui.report.gate import gate_dirs  # last, after the comparison's files

    verdict = gate_dirs(reports[0], reports[1], gate_pct)
    sys.stderr.flush()
    if args.json:
        sys.stdout.writelines(json_lines(verdict.to_json()))
    else:
        print("\n".join(verdict.lines()))
    return EXIT_FAILED if verdict.regressed else EXIT_OK


def _attach(args: argparse.Namespace) -> int:
    from specbench_tui.engine.control_socket import attach_control

    control = attach_control(args.attach)
    if args.send:
        return _send(control, args.send)
    from specbench_tui.tui.app import run_console

    return run_console(control, theme=args.theme, **_refresh(args))


def _dry_run(args: argparse.Namespace, plan: Any, layout: Any, measured: Any) -> int:
    """``--dry-run``: the plan reviewed, and with ``--check`` each host asked now."""
    from specbench_tui.engine.selection import matches
    from specbench_tui.plan.review import render_json, render_text, review
    from specbench_tui.printable import printable

    only = args.only
    select = (lambda cell: matches(cell, only)) if only else None
    r = review(plan, layout.root, sim=args.sim, select=select, only=only or "", measured=measured)
    if r.selected is not None and not r.selected:
        raise InputError(
            f"--only {only!r} matches no cell id or name; see the names with --dry-run"
        )
    checked = None
    if args.check:
        from specbench_tui.engine.host_check import check_hosts

        hosts = HostOptions.from_args(args)
        checked = asyncio.run(check_hosts(plan, sim=args.sim, options=hosts))
    if args.json:
        doc = render_json(r)
        if checked is not None:
            doc["preflight"] = [h.to_json() for h in checked]
        sys.stdout.writelines(json_lines(doc))
    else:
        print(printable(render_text(r)))
        if checked is not None:
            print("\nPreflight:")
            for h in checked:
                print(printable("\n".join(h.lines())))
    problems = [f"host {h.host}: {p}" for h in checked or () for p in h.problems]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"preflight: {problems[0]}{more}")
    return EXIT_OK


def _headless(
    args: argparse.Namespace, plan: Any, layout: Any, measured: Any, rerun: tuple[str, ...]
) -> int:
    """``--headless``: the campaign in this process, one line per event (or a batch job's
    group, ``--job``)."""
    from specbench_tui.engine.campaign import Campaign, CampaignOptions
    from specbench_tui.engine.report_child import write_report
    from specbench_tui.report.comparisons import unlike

    share = None
    if args.job is not None:
        from specbench_tui.engine.job_share import JobShare

        share = JobShare.load(args.job)
    elif not args.sim:  # the engines of running servers (url), read from them
        from specbench_tui.engine.url_servers import read_running

        plan = asyncio.run(read_running(plan))
    campaign = Campaign.prepare(
        plan,
        layout,
        CampaignOptions(
            sim=args.sim,
            fresh=args.fresh,
            only=args.only,
            rerun_failed=args.rerun_failed,
            rerun=rerun,
            hosts=HostOptions.from_args(args),
            job=share,
            control_socket=share is None,  # a job is steered through its mailbox
            write_views=share is None,
            report=write_report if share is None else None,
            audit=unlike,
            measured=measured,
        ),
    )
    if campaign.moved_aside is not None:
        print(f"specbench-tui: previous results moved to {campaign.moved_aside}")
    try:
        asyncio.run(campaign.check_hosts())
    except BaseException:
        campaign.store.close()
        raise
    if share is not None:
        from specbench_tui.engine.batch_job import run_job

        return run_job(campaign, share)
    from specbench_tui.engine.headless import run_headless

    return run_headless(campaign)


def _console(
    args: argparse.Namespace,
    plan: Any,
    results_root: Path,
    layout: Any,
    rerun: tuple[str, ...],
) -> int:
    """The console on a campaign it starts: the engine runs headless in a child process (its
    timings are never the console's to share) and the console follows it through the socket;
    r, R and g after the end start another child on the same results."""
    from specbench_tui.engine.child import EngineProcess, engine_argv
    from specbench_tui.engine.store import ResultsStore
    from specbench_tui.tui.app import run_console
    from specbench_tui.tui.relaunch import ChildRelaunch

    if args.fresh:
        moved = ResultsStore.move_aside(layout)
        if moved is not None:
            print(f"specbench-tui: previous results moved to {moved}")
    relaunch = ChildRelaunch(
        plan=plan.path,
        results=results_root,
        layout=layout,
        sim=args.sim,
        hosts=HostOptions.from_args(args),
    )
    argv = engine_argv(
        plan.path,
        results_root,
        sim=args.sim,
        only=args.only,
        rerun_failed=args.rerun_failed,
        rerun=rerun,
        hosts=HostOptions.from_args(args),
        estimate_from=args.estimate_from,
    )
    # the console draws at once; the child loads and checks its hosts meanwhile (its
    # error before the run, if any, is raised by run_console once the terminal is back)
    control = EngineProcess(argv, layout).launch()
    return run_console(control, theme=args.theme, relaunch=relaunch, **_refresh(args))


def _refresh(args: argparse.Namespace) -> dict[str, float]:
    """``--refresh HZ`` for run_console (nothing when not given: the console's default)."""
    if args.refresh is None:
        return {}
    if not 0.05 <= args.refresh <= 60:
        raise InputError(f"--refresh {args.refresh:g}: give repaints a second from 0.05 to 60")
    return {"refresh_hz": args.refresh}
