"""`eff games ...`: the command-line entry of eff-games, plugged into `eff` via `eff.commands`.

``info`` (game sizes and LP value), ``solve`` (one algorithm with checkpoints), ``compare``
(several algorithms on the same checkpoints) and ``rtcfr`` (RTCFR+ last vs CFR+ last and average,
``--check`` enforces the reproduction's thresholds). Tables print
``iteration  algo  iterate  exploitability  nash_conv  wall_s``; exploitability = NashConv/2 in chips.
Bad input exits with status 2 and a one-line error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from eff_games.efg import EFG
from eff_games.games import GAMES, from_openspiel, load_game
from eff_games.metrics import UNITS, nash_conv
from eff_games.policy import uniform_policy
from eff_games.solve import ALGORITHMS, ROW_KEYS, compare, payload, resolve_checkpoints, solve
from eff_games.svg import write_svg
from eff_shared.cli import domain_app, print_package_info
from eff_shared.report import parse_csv, plot_series, print_rows

app = domain_app("eff-games", info=False)

GameOpt = Annotated[
    str,
    typer.Option(
        "--game", help=f"Built-in game {sorted(GAMES)}, or any OpenSpiel game with --openspiel."
    ),
]
OpenSpielOpt = Annotated[
    bool,
    typer.Option(
        "--openspiel", help="Build the game through OpenSpiel (extra eff-games\\[openspiel])."
    ),
]
JsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Write the rows and metadata as JSON here.")
]
PlotOpt = Annotated[
    Path | None,
    typer.Option("--plot", help="Write a log-y plot: .svg (built in) or .png (needs matplotlib)."),
]
CheckpointsOpt = Annotated[
    str | None, typer.Option("--checkpoints", help="Comma-separated iterations, e.g. 10,100,1000.")
]
EveryOpt = Annotated[int | None, typer.Option("--every", help="Evaluate every N iterations.")]


def _guard(fn: Callable[[], None]) -> None:
    """Run ``fn``; bad input becomes a one-line error and exit status 2."""
    try:
        fn()
    except (ValueError, TypeError, ImportError, NotImplementedError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _load(game: str, openspiel: bool) -> EFG:
    return from_openspiel(game) if openspiel else load_game(game)


def _checkpoints(iterations: int, checkpoints: str | None, every: int | None) -> list[int]:
    parsed = None if checkpoints is None else parse_csv(checkpoints, int, name="--checkpoints")
    return resolve_checkpoints(iterations, parsed, every)


def _print_rows(game: EFG, rows: list[dict[str, Any]]) -> None:
    print_rows(f"{game.name}: exploitability at the checkpoints", rows, columns=ROW_KEYS)
    typer.echo(f"units: {UNITS}")


def _outputs(
    game: EFG,
    rows: list[dict[str, Any]],
    params: dict[str, Any],
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    if plot_path is not None:
        suffix = plot_path.suffix.lower()
        if suffix not in (".svg", ".png"):
            raise ValueError(f"--plot must end in .svg or .png, got {plot_path.name!r}")
        points = sorted({r["iteration"] for r in rows})
        series: dict[str, list[float]] = {"x": [float(p) for p in points]}
        for r in rows:
            series.setdefault(f"{r['algo']} {r['iterate']}", []).append(
                max(r["exploitability"], 1e-17)
            )
        labels = dict(
            title=f"{game.name}", xlabel="iteration", ylabel="exploitability (NashConv/2)"
        )
        if suffix == ".svg":
            write_svg(plot_path, series, **labels)
        elif plot_series(plot_path, series, logy=True, **labels) is None:
            raise ImportError(
                "PNG plots need matplotlib: pip install 'eff-games[plot]' (or write .svg)"
            )
        typer.echo(f"plot written to {plot_path}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(payload(game, rows, params), indent=2) + "\n")
        typer.echo(f"json written to {json_path}")


def game_facts(game: EFG) -> dict[str, Any]:
    """Sizes, LP value and the uniform policy's NashConv of ``game``."""
    nc = nash_conv(game, uniform_policy(game))
    return {
        "game": game.name,
        **game.sizes(),
        "lp_value_player0": game.value_lp(),
        "uniform_nash_conv": nc,
        "uniform_exploitability": nc / 2,
        "units": "chips; " + UNITS,
    }


@app.command("info")
def info_cmd(
    game: Annotated[
        str | None, typer.Option("--game", help="Also print the facts of this game.")
    ] = None,
    openspiel: OpenSpielOpt = False,
    json_path: JsonOpt = None,
) -> None:
    """What the package contains; with --game, the game's sizes and LP value."""
    print_package_info("eff-games")
    typer.echo(f"built-in games: {', '.join(sorted(GAMES))}; algorithms: {', '.join(ALGORITHMS)}")
    if game is None:
        return

    def body() -> None:
        facts = game_facts(_load(game, openspiel))
        typer.echo(f"game: {facts['game']}")
        typer.echo(f"infosets per player: {facts['infosets'][0]} / {facts['infosets'][1]}")
        typer.echo(
            f"sequences per player (excl. empty): {facts['sequences'][0]} / {facts['sequences'][1]}"
        )
        for key in ("decision_nodes", "chance_nodes", "terminals", "histories", "payoff_nonzeros"):
            typer.echo(f"{key.replace('_', ' ')}: {facts[key]}")
        typer.echo(f"LP value (player 0, chips): {facts['lp_value_player0']:.12f}")
        typer.echo(
            f"uniform policy: nash_conv {facts['uniform_nash_conv']:.10f}, "
            f"exploitability {facts['uniform_exploitability']:.10f} (exploitability = nash_conv/2)"
        )
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(facts, indent=2) + "\n")

    _guard(body)


@app.command("solve")
def solve_cmd(
    game: GameOpt = "leduc_poker",
    algo: Annotated[str, typer.Option("--algo", help=f"One of {list(ALGORITHMS)}.")] = "rtcfr+",
    iterations: Annotated[int, typer.Option("--iterations", help="Number of iterations.")] = 1000,
    checkpoints: CheckpointsOpt = None,
    every: EveryOpt = None,
    iterate: Annotated[str, typer.Option("--iterate", help="last or average.")] = "last",
    mu: Annotated[float | None, typer.Option("--mu", help="RTCFR+ regularisation μ.")] = None,
    gamma: Annotated[float | None, typer.Option("--gamma", help="RTCFR+ γ₀ (or DCFR's γ).")] = None,
    ref_interval: Annotated[int | None, typer.Option("--ref-interval", help="RTCFR+ T_u.")] = None,
    inner: Annotated[
        str | None, typer.Option("--inner", help="RTCFR+ inner solver: cfr+ or pcfr+.")
    ] = None,
    alpha: Annotated[float | None, typer.Option("--alpha", help="DCFR α.")] = None,
    beta: Annotated[float | None, typer.Option("--beta", help="DCFR β.")] = None,
    eta: Annotated[float | None, typer.Option("--eta", help="MMD step size η.")] = None,
    tau: Annotated[float | None, typer.Option("--tau", help="MMD regularisation τ.")] = None,
    openspiel: OpenSpielOpt = False,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Run one algorithm and print exploitability at the checkpoints."""
    given = dict(
        mu=mu,
        gamma=gamma,
        ref_update_interval=ref_interval,
        inner=inner,
        alpha=alpha,
        beta=beta,
        eta=eta,
        tau=tau,
    )
    kwargs = {k: v for k, v in given.items() if v is not None}

    def body() -> None:
        efg = _load(game, openspiel)
        points = _checkpoints(iterations, checkpoints, every)
        res = solve(efg, algo, iterations, checkpoints=points, iterate=iterate, **kwargs)
        _print_rows(efg, res.rows)
        _outputs(efg, res.rows, {"algo": algo, "iterate": iterate, **kwargs}, json_path, plot)

    _guard(body)


@app.command("compare")
def compare_cmd(
    game: GameOpt = "kuhn_poker",
    algos: Annotated[
        str, typer.Option("--algos", help="Comma-separated algorithm names.")
    ] = "cfr,cfr+,rtcfr+",
    iterations: Annotated[int, typer.Option("--iterations", help="Number of iterations.")] = 1000,
    checkpoints: CheckpointsOpt = None,
    every: EveryOpt = None,
    openspiel: OpenSpielOpt = False,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Several algorithms (default parameters) on the same game: last and average iterates."""

    def body() -> None:
        efg = _load(game, openspiel)
        names = parse_csv(algos, name="--algos")
        rows = compare(
            efg, names, iterations, checkpoints=_checkpoints(iterations, checkpoints, every)
        )
        _print_rows(efg, rows)
        _outputs(efg, rows, {"algos": names}, json_path, plot)

    _guard(body)


@app.command("rtcfr")
def rtcfr_cmd(
    game: GameOpt = "leduc_poker",
    iterations: Annotated[int, typer.Option("--iterations", help="Number of iterations.")] = 10000,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Enforce the reproduction's thresholds; exit 1 when one fails."
        ),
    ] = False,
    openspiel: OpenSpielOpt = False,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
) -> None:
    """RTCFR+ last iterate vs CFR+ last and average iterates (the games.rtcfr reproduction)."""
    from eff_games.reproduce.rtcfr import claims_for, run_comparison

    failed: list[str] = []

    def body() -> None:
        efg = _load(game, openspiel)
        points = _checkpoints(iterations, None, max(1, iterations // 20))
        rows = run_comparison(efg, iterations, points)
        _print_rows(efg, rows)
        _outputs(efg, rows, {"algos": ["rtcfr+", "cfr+"], "rtcfr+": "defaults"}, json_path, plot)
        name = game if game in GAMES else efg.name
        claims = claims_for(name, rows)
        if not claims:
            typer.echo(f"no thresholds for {name} at the evaluated iterations")
        for c in claims:
            status = "pass" if c.passed else "FAIL"
            typer.echo(f"[{status}] {c.text}: {c.measured:.3e} {c.op} {c.threshold:.3e}")
            if not c.passed:
                failed.append(c.text)

    _guard(body)
    if check and failed:
        raise typer.Exit(1)
