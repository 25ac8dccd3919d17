"""The goal lines `tvbod bench latency` prints under its table:
each goal met, MISSED, or not measured with what to add to the command."""

from __future__ import annotations


def ratio_text(r: float) -> str:
    """One value/ref ratio as the table shows it: `1` (equal to 1e-9), `1-2e-06`, or `0.9894`."""
    if r >= 1.0 - 1e-9:  # equal up to round-off
        return "1"
    return f"1-{1.0 - r:.0e}" if 1.0 - r < 1e-3 else f"{r:.4f}"


#: The goals at d = 4, n = 400: ask p50 (ms), BoTorch's step over tell+ask (at least),
#: tell+ask over the plain numpy step (at most).
GOAL_CELL, GOAL_ASK_MS, GOAL_BOTORCH, GOAL_PLAIN = (4, 400), 3.0, 20.0, 0.4


def goal_lines(result: dict) -> list[str]:
    """The goal lines printed under the table: met, missed, or not measured (and what to run)."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    d, n = GOAL_CELL
    row = next((r for r in result["rows"] if (r["d"], r["n"]) == GOAL_CELL), None)
    where = f"at d={d} n={n}"
    if row is None:
        lines = [f"goal ask p50 <= {GOAL_ASK_MS:g} ms {where}: not measured (add --dims {d} "
                 f"--sizes {n})"]
    else:
        ask = row["ask_ms"]["p50"]
        lines = [f"goal ask p50 <= {GOAL_ASK_MS:g} ms {where}: {verdict(ask <= GOAL_ASK_MS)} "
                 f"({ask:.2f} ms; the lead measures it idle)"]
    for name, goal, text in (("botorch", GOAL_BOTORCH, f">= {GOAL_BOTORCH:g}x faster than "
                              "BoTorch's step"),
                             ("numpy", GOAL_PLAIN, f"<= {GOAL_PLAIN:g}x the plain numpy step")):
        if row is None or f"{name}_ms" not in row:
            lines.append(f"goal tell+ask {text} {where}: not measured (--compare {name}"
                         + ("" if row else f" --dims {d} --sizes {n}") + ")")
            continue
        over = row[f"{name}_over_ask_tell"]  # the other step's time over tell+ask
        ok = over >= goal if name == "botorch" else 1.0 / over <= goal
        ratio = f"{over:.1f}x faster" if name == "botorch" else f"{1.0 / over:.2f}x"
        lines.append(f"goal tell+ask {text} {where}: {verdict(ok)} ({ratio})")
    lines.append(_value_goal(result))
    return lines


def _value_goal(result: dict) -> str:
    """`equal or better acquisition value`: the worst ask value/ref per d against the compared
    steps' worst at the same cells (the dense reference is the same). "Equal" is within the ask's
    `budget.tolerance`, the relative gain at which its polish stops by design (1e-5 by default)."""
    from tvbod.core.optimize import TOLERANCE

    slack = result.get("settings", {}).get("tolerance")
    slack = TOLERANCE if slack is None else slack
    parts, ok = [], True
    for d in sorted({r["d"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["d"] == d and r["ask_value_ratio"]["count"]]
        if not rows:
            continue
        worst = min(r["ask_value_ratio"]["worst"] for r in rows)
        others = [r[k]["worst"] for r in rows for k in r
                  if k.endswith("_value_ratio") and k != "ask_value_ratio" and r[k]["count"]]
        ok &= not others or worst >= min(others) - slack
        parts.append(f"d={d} {ratio_text(worst)}"
                     + (f" (compared {min(others):.6f})" if others else ""))
    if not parts:
        return "goal ask value/ref worst per d: not measured (--ref-calls 0)"
    return (f"goal ask value/ref worst per d >= the compared steps' (within the polish "
            f"tolerance {slack:g}): " + ("met" if ok else "MISSED") + "; " + ", ".join(parts))
