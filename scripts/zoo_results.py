"""The zoo tables of docs/RESULTS.md, from the zoo benchmark's saved figures (never rerun here).

``scripts/bench/zoo.py`` writes ``scripts/data/zoo_bench.json`` (the CPU zoo's leave-one-family-out tables
for latency and peak memory, each timm GPU's summary with and without the layer-table features, the
screening time and its last line); :func:`zoo_lines` turns it into Markdown. :mod:`scripts.results` calls
it; ``python -m scripts.zoo_results`` prints the section alone.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
#: The benchmark's saved figures.
ZOO_BENCH = ROOT / "scripts" / "data" / "zoo_bench.json"


def _f(v: object, spec: str = ".1f") -> str:
    """A number for a table cell; ``-`` for a missing one (NaN: e.g. Spearman of a family with < 3 rows)."""
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    return "-" if x != x else format(x, spec)


def cpu_family_table(cpu: dict) -> list[str]:
    """One Markdown row per held-out family of the CPU zoo (worst CARB latency MAPE first): latency MAPE
    of CARB / Hidden Joules / B1, CARB's Spearman (families with >= 3 rows), rows within 20 %, interval
    coverage and hi/lo; peak-memory MAPE of CARB / the liveness estimate / HJ / B1."""
    lat = pd.DataFrame(cpu["latency"]["table"]).set_index("family")
    mem = pd.DataFrame(cpu["memory"]["table"]).set_index("family")
    lines = ["| held-out family | networks | rows | latency MAPE %: CARB | HJ | B1 | Spearman CARB | CARB rows within "
             "20 % | 90 % interval coverage (hi/lo) | memory MAPE %: CARB | liveness (no fit) | HJ | B1 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fam, r in lat.sort_values("carb_mape_pct", ascending=False).iterrows():
        m = mem.loc[fam]
        lines.append(f"| {fam} | {int(r['models'])} | {int(r['rows'])} | {_f(r['carb_mape_pct'])} | "
                     f"{_f(r['hj_mape_pct'])} | "
                     f"{_f(r['b1_mape_pct'])} | {_f(r['carb_rho'], '.2f')} | {_f(r['carb_within20_pct'], '.0f')} % | "
                     f"{_f(r['coverage'], '.2f')} ({_f(r['hi_lo'], '.2f')}) | {_f(m['carb_mape_pct'])} | "
                     f"{_f(m['physics_mape_pct'])} | {_f(m['hj_mape_pct'])} | {_f(m['b1_mape_pct'])} |")
    return lines


def cpu_summary(cpu: dict) -> list[str]:
    """The CPU zoo's pooled figures, latency and memory, one line each."""
    out = []
    for key, label in (("latency", "Latency"), ("memory", "Peak memory")):
        s = cpu[key]["summary"]
        phys = (f", liveness estimate (no fit) {_f(s['physics_pooled_pct'])} % (worst {_f(s['physics_mape_max'])} %)"
                if "physics_pooled_pct" in s else "")
        out.append(f"- {label}: pooled MAPE CARB {_f(s['carb_pooled_pct'])} %, Hidden Joules' regression "
                   f"{_f(s['hj_pooled_pct'])} %, B1 {_f(s['b1_pooled_pct'])} %{phys}; families within 20 %: CARB "
                   f"{s['within20']}/{s['families']}, HJ {s['hj_within20_fams']}, B1 {s['b1_within20_fams']}; worst "
                   f"family {s['worst']} {_f(s['mape_max'])} % (HJ worst {_f(s['hj_mape_max'])} %, B1 "
                   f"{_f(s['b1_mape_max'])} %); lowest Spearman {_f(s['rho_min'], '.2f')}; CARB beats B1 on "
                   f"{s['b1_wins']}/{s['families']} families, HJ on {s['hj_wins']}/{s['families']}; 90 % intervals "
                   f"cover {_f(s['coverage'], '.3f')} (mean over families; {_f(s['coverage_rows'], '.3f')} of rows), "
                   f"median hi/lo {_f(s['hi_lo'], '.2f')}.")
    return out


def gpu_table(gpu: list[dict], no_trace: list[dict] | None) -> list[str]:
    """One Markdown row per timm device: LOFO latency of CARB with the layer-table features (and without,
    when measured), HJ, B1; families within 20 %, worst family, lowest Spearman, wins, interval coverage."""
    plain = {s["device"]: s for s in (no_trace or [])}
    lines = ["| device (timm's files) | families | networks | pooled MAPE %: CARB with trace | without trace | HJ | "
             "B1 | "
             "families within 20 %: CARB / HJ / B1 | worst family (CARB %) | lowest Spearman | CARB beats B1 / HJ | "
             "90 % coverage (hi/lo) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in gpu:
        p = plain.get(s["device"], {})
        lines.append(f"| {s['device']} | {s['families']} | {s['models']} | {_f(s['carb_pooled_pct'])} | "
                     f"{_f(p.get('carb_pooled_pct'))} | {_f(s['hj_pooled_pct'])} | {_f(s['b1_pooled_pct'])} | "
                     f"{s['within20']} / {s['hj_within20_fams']} / {s['b1_within20_fams']} | {s['worst']} "
                     f"({_f(s['mape_max'])}) | {_f(s['rho_min'], '.2f')} | {s['b1_wins']} / {s['hj_wins']} | "
                     f"{_f(s['coverage'], '.3f')} ({_f(s['hi_lo'], '.2f')}) |")
    return lines


def gpu_worst_families(gpu: list[dict], n: int = 5) -> list[str]:
    """One Markdown row per timm device with its ``n`` worst held-out families by CARB's MAPE (each with
    HJ's and B1's MAPE on the same family); devices saved without a per-family ``table`` are skipped."""
    rows = [s for s in gpu if s.get("table")]
    if not rows:
        return []
    lines = [f"| device | worst {n} families: CARB % (HJ %, B1 %; Spearman) |", "|---|---|"]
    for s in rows:
        worst = sorted(s["table"], key=lambda r: -r["carb_mape_pct"])[:n]
        cells = "; ".join(f"{r['family']} {_f(r['carb_mape_pct'], '.0f')} ({_f(r['hj_mape_pct'], '.0f')}, "
                          f"{_f(r['b1_mape_pct'], '.0f')}; {_f(r['carb_rho'], '.2f')})" for r in worst)
        lines.append(f"| {s['device']} | {cells} |")
    return lines


def zoo_lines(path: Path = ZOO_BENCH) -> list[str]:
    """The zoo section (Markdown lines) from the benchmark's saved figures at ``path``; a one-line note
    when the file is missing (the benchmark has not been run)."""
    if not path.is_file():
        return ["### Any backbone: families never measured", "",
                f"(no zoo figures: run `python scripts/bench/zoo.py --table --gpu-no-trace-too`, which writes "
                f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})", ""]
    z = json.loads(path.read_text())
    out = ["### Any backbone: families never measured", "",
           f"From `{z['command']}` (saved in `scripts/data/zoo_bench.json`; last line: `{z['last_line']}`).", ""]
    for cpu in z.get("cpus") or ([z["cpu"]] if "cpu" in z else []):   # each CPU zoo its own device
        out += [f"Leave-one-family-out on the CPU zoo (`{cpu['data']}`, {cpu.get('device', 'Zen 4 VM')}): each "
                "family predicted by "
                "models fitted on the other families only. CARB: the registered model, the cascade that "
                f"`carb-train data.path={Path(cpu['data']).stem}` fits (the layer table's features from the current "
                "tracer, "
                "physics priors: a roofline for latency, the tracer's liveness peak for memory, each times the "
                "stage's tree-ensemble correction), refitted once per held-out family. HJ: Hidden Joules' "
                "log-linear regression on params, GMACs, activations; B1: FLOPs only. Intervals: 90 % "
                "cross-conformal over held-out families. Energy is not measurable on this VM.", ""]
        out += cpu_summary(cpu) + [""] + cpu_family_table(cpu) + [""]
    if z.get("gpu"):
        out += ["Leave-one-family-out latency on timm's published benchmark files (families: leading letters "
                "of the model name with >= 5 models), CARB's zoo model with and without the layer-table "
                "features (with them: a non-negative sum of per-kind costs from the layer table of the graph "
                "each file was timed on, reparameterised or not as its published parameter counts show, fitted "
                "Huber-robust on the log error, times a LightGBM residual, the result kept within a margin of "
                "the span between that sum and Hidden Joules' regression, the base taken where the residual "
                "goes past that regression; on the CPU file clipped to the span, the margin chosen per held-out "
                "family on the other families):", ""] + gpu_table(z["gpu"], z.get("gpu_no_trace")) + [""]
        worst = gpu_worst_families(z["gpu"])
        out += (["Worst held-out families per device (all families: `scripts/data/zoo_bench.json`):", ""] + worst + [""]
                if worst else [])
    out += [f"Screening the zoo list at 8 batch sizes x 3 precisions x 3 input sizes ({z['screen_candidates']} "
            f"candidates) after load: {_f(z['screen_s'], '.2f')} s; tracing 300 models cold on 2 processes: "
            f"{_f(z['trace_cold_s'])} s (`scripts/data/zoo_trace_bench.json`).", ""]
    return out + zoo_device_lines()


#: ``scripts/bench/zoo.py --part device``'s saved figures (a GPU never measured).
ZOO_DEVICE_BENCH = ROOT / "scripts" / "data" / "zoo_device_bench.json"


def zoo_device_lines(path: Path = ZOO_DEVICE_BENCH) -> list[str]:
    """The "GPU never measured" paragraph and per-target table (Markdown lines) from ``--part device``'s saved
    figures at ``path``; a one-line note when the file is missing."""
    head = "#### Zoo latency on a GPU never measured: leave-one-GPU-out"
    if not path.is_file():
        return [head, "", "(no figures: run `python scripts/bench/zoo.py --part device`, which writes "
                f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})", ""]
    z = json.loads(path.read_text())
    d, k = z["device"], int(z["device"]["settings"]["k"])
    mm = int(d["settings"].get("min_models", 5))   # the settings the figures were made with, not today's conf
    avg = ("averaged over the sources timed on its PyTorch version where there is one"
           if d["settings"].get("same_stack", True) else "averaged over every source")
    out = [head, "", f"From `{z['command']}` (last line: `{d['line']}`). Each of timm's GPU files is the target in "
           "turn: its networks' times from the other GPUs' (measured; a source's own zoo model where it did not "
           "time a network) moved by the spec records (peak, bandwidth, power; weights fitted on the sources' pairs "
           f"only), {avg} (K=0), then "
           f"recalibrated on K={k} of its networks picked space-filling "
           "over the zoo's features (scored on its other networks). Beside it: the nearest source GPU's measured "
           f"time scaled by the same spec ratio, and FLOPs only. MAPE %, families (>= {mm} networks) within 20 %, "
           "worst family %, Spearman over networks:", "",
           f"| target | networks | CARB K=0 | CARB K={k} | nearest x spec K=0 | nearest K={k} | FLOPs K=0 | "
           "Spearman K=0 |", "|---|---|---|---|---|---|---|---|"]
    for r in d["logo"]:
        fam = int(r["families"])
        out.append(f"| {r['target']} | {r['networks']} | {_f(r['carb_k0_mape_pct'])}, "
                   f"{r['carb_k0_within20']}/{fam}, {r['carb_k0_worst']} {_f(r['carb_k0_mape_max'])} | "
                   f"{_f(r[f'carb_k{k}_mape_pct'])}, {r[f'carb_k{k}_within20']}/{fam} | "
                   f"{_f(r['nearest_k0_mape_pct'])}, {r['nearest_k0_within20']}/{fam} | "
                   f"{_f(r[f'nearest_k{k}_mape_pct'])} | {_f(r['flops_k0_mape_pct'])} | "
                   f"{_f(r['carb_k0_rho'], '.3f')} |")
    out.append("")
    if d.get("lgfo"):
        out += ["A new GPU and a new family (the family removed from the sources too; their times of it from each "
                "source's zoo model fitted without it): CARB K=0 / K=" + str(k) + " pooled MAPE % (families within "
                "20 %) " + "; ".join(f"{r['target']} {_f(r['carb_k0_mape_pct'])} ({r['carb_k0_within20']}/"
                                     f"{r['families']}) / {_f(r[f'carb_k{k}_mape_pct'])}, FLOPs "
                                     f"{_f(r['flops_k0_mape_pct'])}" for r in d["lgfo"]) + ".", ""]
    if d.get("k0_band"):
        out += ["K=0 90 % band of a new GPU (from the other GPUs' K=0 errors, each predicted without the target: "
                "device-level form): " + "; ".join(f"{r['target']} covers {_f(r['coverage'], '.3f')} at hi/lo "
                                                   f"{_f(r['hi_lo'], '.2f')}" for r in d["k0_band"]) + ".", ""]
    return out


if __name__ == "__main__":
    print("\n".join(zoo_lines(Path(sys.argv[1]) if len(sys.argv) > 1 else ZOO_BENCH)))
