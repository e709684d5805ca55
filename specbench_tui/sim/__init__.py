"""The embedded simulated server: ``python -m specbench_tui.sim ARGS``.

A real HTTP server process per service group that stands in for the registry's simulated engine
(``SIMULATED_ENGINE`` in ``engines/registry.py``), speaking its API (``/generate``,
``/v1/chat/completions``, ``/health_generate``, ``/get_server_info``, ...) and printing its log
lines (its adapter's ``log_format``), so that a whole campaign (start, wait for health,
benchmark, tail the log, stop, wait for GPU memory to be freed) runs end to end on a laptop.
``/sim/requests/{rid}`` adds what the simulator scheduled for each request, to check the
client's timing against.

The model (all times are simulated and divided by ``--speed``; ``--sim-fault slow:X``
multiplies step times by X):

* Start-up: 8 s + 2 s x TP (+2 s with a draft model): CUDA context, weights (memory ramps to
  weights/TP), the KV pool (up to ``--mem-fraction-static`` of 97887 MiB), CUDA graphs, one
  warm-up request, then ``The server is fired up and ready to roll!``. The port listens from
  the start and answers 503 on ``/health`` and ``/health_generate`` until then.
* Decode step of the target model: 28 / 18 / 12 / 9 ms at TP 1 / 2 / 4 / 8, +1.2 % per extra
  running request. Prefill: half a step plus 0.22 ms per uncached prompt token / TP^0.85.
* Acceptance: the prompt is classified (translate / summarize by their instruction, code by
  code cues, math by word-problem cues, chat otherwise). A 16-token DFlash block accepts on
  average code 4.5, math 4.0, chat 3.0, summarize 2.8, translate 2.5 tokens per step; this
  fixes a per-token acceptance probability p, and each step draws 1 + min(Geometric(p), depth)
  tokens from a PRNG seeded by ``--seed`` and the prompt. DFLASH: depth = K draft tokens.
  DDTREE with budget B: mean accept length x (0.85 + 0.1 log2 B), depth min(K, B). EAGLE /
  EAGLE3 / NEXTN: a chain of ``--speculative-num-steps`` with p scaled by 0.93 / 0.97 / 0.98.
  AR yields one token a step and reports no speculative fields.
* Step cost with speculation: a draft pass (8 % of a step, DDTree adds tree building per node)
  plus verification, whose cost grows with (verified tokens / 160)^2 x batch: cheap while
  memory-bound, expensive once compute-bound. Hence DDTree's tokens/s peaks near B = 32-64
  and speculation's advantage shrinks with concurrency.
* Continuous batching with ``--max-running-requests`` (default 48 AR, 32 speculative,
  2048/B for DDTree, clamped to 4..32) and a queue beyond it; one streamed chunk per step
  (``--sim-burst N``: a chunk once N tokens are new, as a server that bursts sends them;
  ``--sim-record FILE``: each finished request's record, what was sent and when, appended to
  FILE as a JSON line).
* Prefix cache over 64-character blocks of prompt + output: multi-turn contexts get growing
  ``cached_tokens`` and pay prefill only for the new part.
* Output: deterministic words from a PRNG seeded by the prompt only, so every config returns
  the same greedy text; about a third of prompts stop early (EOS), the rest run to
  ``max_new_tokens``; token ids travel as ``output_ids``, as the engine sends them.
  ``--sim-fault diverge`` switches the words after a prompt-dependent position, to exercise
  the greedy-equivalence check (``diverge-tp:N``: on a TP-N server only, so a config's outputs
  differ across TP sizes); ``--sim-fault leak:N`` makes the request that follows one of
  N tokens or more (prompt and output) diverge a few tokens in, as recurrent state leaking
  between requests does, for the state-leak probe; ``--sim-fault neighbours:X`` runs X times
  slower while another simulated server of the host has decoded within the last second (its
  GPU state files say when), as packed servers that disturb each other do; an idle neighbour
  that is up disturbs none.

Reported times (``e2e_latency``, log throughputs, DDTree draft/verify ms) are wall-clock, i.e.
what a client of this process experiences at the chosen ``--speed``.
"""
