"""Figures of the submission report, drawn from what `rig show --json` prints.

ASC: an excerpt of the power trace, throughput per timed run, energy per inference per window,
and replicability against the tolerance band. QUBO: gap and power against timeout, time to
solution against workload size, and the largest workload solved.

Every figure is its own `matplotlib.figure.Figure` on the Agg canvas (no pyplot, no global
state), saved as a PNG and cleared at once: a report may draw dozens. A figure without data is
not drawn; missing data never raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import (
    EngFormatter,
    FixedLocator,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
    PercentFormatter,
)
from matplotlib.transforms import blended_transform_factory

#: Figure width fits an A4 text column; PNG resolution of every figure.
WIDTH_IN, HEIGHT_IN, DPI = 6.5, 3.2, 160
#: The trace figure stacks two panels: a little taller than the others.
TRACE_HEIGHT_IN = 4.2
#: tab10 without its red: red is kept for "outside the band" and for the simulated stamp.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
RED = "#d62728"
GRID = "#e0e0e0"
#: Bins of the whole-recording envelope; span of the zoom around the first window's start.
TRACE_BINS = 1500
ZOOM_S = 0.1
#: Above this many samples the zoom shows a min/max envelope instead of raw samples.
ZOOM_RAW_MAX = 20_000
#: TTS thresholds of QUBO.md (gap to the BKS, as fractions).
GAP_THRESHOLDS = (0.1, 0.05, 0.01)
#: Unit of throughput on axes and in captions.
RATE_UNIT = "inf/s"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
LINESTYLES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class FigureFile:
    """One PNG of the report: its key (e.g. "asc-trace"), where it is, and its caption."""

    key: str
    path: Path
    caption: str


@dataclass(frozen=True)
class AscRunInput:
    """An ASC run folder: its short name, its `rig show --json` dict, its trace (or None)."""

    name: str
    show: dict
    trace: Path | None


@dataclass(frozen=True)
class SweepInput:
    """A QUBO sweep folder: its short name and its `rig show --json` dict."""

    name: str
    show: dict


# -- common drawing ------------------------------------------------------------------------------


def _figure(height: float = HEIGHT_IN) -> Figure:
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, facecolor="white", layout="constrained")
    FigureCanvasAgg(fig)
    engine = fig.get_layout_engine()
    assert isinstance(engine, ConstrainedLayoutEngine)  # layout="constrained"
    engine.set(w_pad=0.04, h_pad=0.04, wspace=0.03, hspace=0.06)
    return fig


def _style(ax: Axes) -> None:
    """Light grid behind the data, no top/right frame, 8 pt ticks."""
    ax.set_facecolor("white")
    ax.grid(True, color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_linewidth(0.7)
        ax.spines[side].set_color("#555555")
    ax.tick_params(labelsize=8, width=0.7, length=3, color="#555555")
    ax.xaxis.label.set_fontsize(8.5)
    ax.yaxis.label.set_fontsize(8.5)


def _legend(ax: Axes, **kwargs: Any) -> None:
    ax.legend(fontsize=7.5, frameon=True, framealpha=0.9, edgecolor="#cccccc", **kwargs)


def stamp_label(fig: Figure, label: str | None) -> None:
    """Stamp `label` (e.g. "SIMULATED (virtual bench)") in the figure's top-right corner.

    On the figure, not in an axes: the mark must survive any crop of a panel.
    """
    if label:
        fig.text(0.995, 0.99, label, ha="right", va="top", fontsize=8, fontweight="bold",
                 color="darkred",
                 bbox={"boxstyle": "round,pad=0.25", "facecolor": "white",
                       "edgecolor": "darkred", "linewidth": 0.8})


def _save(fig: Figure, path: Path, title: str, label: str | None) -> Path:
    """Title top left, the label stamped top right, PNG written, figure freed."""
    fig.suptitle(title, x=0.01, ha="left", fontsize=9.5, fontweight="bold")
    stamp_label(fig, label)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor="white")
    fig.clear()
    return path


def _series_legend(ax: Axes, title: str, handles: list[Any] | None = None,
                   x: float = 1.02) -> None:
    """Legend right of the last panel, below the title row (where the label stamp sits)."""
    if handles is None:
        handles = ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(x, 1.0), fontsize=7.5,
              frameon=False, title=title, title_fontsize=7.5, alignment="left", borderaxespad=0.0)


def _num(value: Any) -> float | None:
    """A finite float, or None for None, text and NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _values(items: Iterable[dict], key: str) -> np.ndarray:
    """The finite numbers under `key`, in order (None and NaN dropped)."""
    vals = [_num(item.get(key)) for item in items]
    return np.array([v for v in vals if v is not None], dtype=np.float64)


_PREFIXES = {-15: "f", -12: "p", -9: "n", -6: "µ", -3: "m", 0: "", 3: "k", 6: "M", 9: "G"}


def _eng(value: float, unit: str, digits: int = 4) -> str:
    """`value` with an SI prefix and `digits` significant digits: 44.999e-6 -> "45 µJ"."""
    if value == 0 or not math.isfinite(value) or (unit == RATE_UNIT and abs(value) < 1000):
        return f"{value:.{digits}g} {unit}"  # no "960 minf/s": a rate below 1 k reads plainly
    exp = int(min(9, max(-15, math.floor(math.log10(abs(value)) / 3) * 3)))
    mant = value / 10.0**exp
    if round(abs(mant), max(0, digits - 1 - math.floor(math.log10(abs(mant))))) >= 1000:
        exp, mant = exp + 3, mant / 1000  # 999.96 rounds up to the next prefix
    return f"{mant:.{digits}g} {_PREFIXES.get(exp, f'e{exp}')}{unit}"


def _axis_formatter(unit: str) -> Any:
    """SI prefixes on an axis, except for rates below a thousand inferences per second."""
    if unit != RATE_UNIT:
        return EngFormatter(unit=unit)
    eng = EngFormatter(unit=unit)
    return FuncFormatter(lambda v, pos: eng(v, pos) if abs(v) >= 1000 else f"{v:g} {unit}")


def _pct(value: float) -> str:
    return f"{value * 100:.3g} %"


# -- ASC -----------------------------------------------------------------------------------------


def asc_figures(runs: list[AscRunInput], out_dir: Path, prefix: str, *,
                label: str | None = None, tolerance: float = 0.05) -> list[FigureFile]:
    """The ASC figures of one system (several run folders are several series).

    asc-trace (first run whose trace can be read), asc-throughput, asc-energy (runs with energy
    windows) and asc-replicability; those without data are left out.
    """
    out_dir = Path(out_dir)
    files: list[FigureFile] = []
    for run in runs:
        if run.trace is None:
            continue
        excerpt = _read_excerpt(Path(run.trace), _measurements(run.show))
        if excerpt is not None:
            files.append(_trace_figure(run, excerpt, out_dir / f"{prefix}-asc-trace.png", label))
            break
    for spec in (_THROUGHPUT, _ENERGY):
        made = _dot_figure(spec, runs, out_dir, prefix, label)
        if made is not None:
            files.append(made)
    made = _replicability_figure(runs, out_dir, prefix, label, tolerance)
    if made is not None:
        files.append(made)
    return files


def _measurements(show: dict) -> dict[str, list[dict]]:
    got = show.get("measurements") or {}
    return {key: [m for m in got.get(key) or [] if isinstance(m, dict)]
            for key in ("latency_runs", "energy_windows", "idle_spans")}


def _summary(show: dict) -> dict:
    summary = show.get("summary")
    return summary if isinstance(summary, dict) else {}


@dataclass
class _Excerpt:
    """What the trace figure shows, read from the JLS file with bounded memory."""

    rate: float
    samples: int
    bin_samples: int
    t_bins: np.ndarray  # bin centres [s]
    p_mean: np.ndarray
    p_min: np.ndarray
    p_max: np.ndarray
    derived: bool  # power from current x per-bin mean voltage (no power signal in the file)
    windows: list[tuple[int, float, float]] = field(default_factory=list)  # index, start, end [s]
    idles: list[tuple[float, float]] = field(default_factory=list)
    zoom_anchor_s: float | None = None
    zoom_what: str = ""
    zoom_span_s: float = 0.0
    zoom_t: np.ndarray | None = None  # relative to the anchor [s]
    zoom_p: np.ndarray | None = None
    zoom_lo: np.ndarray | None = None  # envelope instead of raw samples (fast traces)
    zoom_hi: np.ndarray | None = None
    zoom_gpio: np.ndarray | None = None


def _read_excerpt(path: Path, meas: dict[str, list[dict]]) -> _Excerpt | None:
    """The envelope and zoom of a trace, or None when the file is missing or unreadable."""
    if not path.is_file():
        return None
    import pyjls  # C extension: only when a trace is drawn

    from rig.errors import AnalysisError
    from rig.traces.files import captured_c_output, open_jls_reader

    try:
        reader, _ = open_jls_reader(path)  # pyjls's C-level messages caught, not printed
    except AnalysisError:  # any failure: no figure
        return None
    try:
        with captured_c_output():
            return _excerpt(reader, pyjls, meas)
    except Exception:  # truncated or odd file: the report goes on without the picture
        return None
    finally:
        reader.close()


def _excerpt(reader: Any, pyjls: Any, meas: dict[str, list[dict]]) -> _Excerpt | None:
    from rig.traces.files import _rig_user_data, set_voltage_of, trace_end

    sigs = {s.name: s for s in reader.signals.values()
            if s.signal_type == pyjls.SignalType.FSR and s.signal_id != 0}
    power, cur, vol = sigs.get("power"), sigs.get("current"), sigs.get("voltage")
    if power is None and vol is None:  # a monitor that sets the supply: its value, not a signal
        set_v = set_voltage_of(_rig_user_data(reader))
        vol = set_v[0] if set_v else None
    if power is not None:
        n, timed = int(power.length), power
    elif cur is not None and vol is not None:
        n, timed = int(min(cur.length, cur.length if isinstance(vol, float) else vol.length)), cur
    else:
        return None
    n = trace_end(_rig_user_data(reader), n)  # filler after the trace's end is not its
    if n < 2:
        return None
    rate = _trace_rate(reader, float(timed.sample_rate), meas["energy_windows"])
    if not rate > 0:
        return None

    inc = max(1, math.ceil(n / TRACE_BINS))
    if power is not None:
        stats = _stats(reader, power.signal_id, 0, n, inc)
        p_mean, p_min, p_max = stats[:, 0], stats[:, 2], stats[:, 3]
    else:  # a picture, not a measurement: current envelope scaled by the bin's mean voltage
        i_st = _stats(reader, timed.signal_id, 0, n, inc)  # the current
        v_mean = _voltage_means(reader, vol, 0, n, inc)
        p_mean, p_min, p_max = i_st[:, 0] * v_mean, i_st[:, 2] * v_mean, i_st[:, 3] * v_mean
    starts = np.arange(len(p_mean)) * inc
    centres = (starts + np.minimum(starts + inc, n)) / 2.0 / rate

    ex = _Excerpt(rate=rate, samples=n, bin_samples=inc, t_bins=centres, p_mean=p_mean,
                  p_min=p_min, p_max=p_max, derived=power is None)
    for i, w in enumerate(meas["energy_windows"]):
        s0, s1 = _num(w.get("start_sample")), _num(w.get("end_sample"))
        if s0 is None or s1 is None or s1 <= s0:
            continue  # no trace behind it (rails read by the DUT's own board)
        t0 = _num(w.get("start_s"))
        t1 = _num(w.get("end_s"))
        said = _num(w.get("index"))
        index = int(said) if said is not None else i
        ex.windows.append((index, s0 / rate if t0 is None else t0, s1 / rate if t1 is None else t1))
    for span in meas["idle_spans"]:
        s0, s1 = _num(span.get("start_sample")), _num(span.get("end_sample"))
        if s0 is not None and s1 is not None and s1 > s0:
            ex.idles.append((s0 / rate, s1 / rate))

    if ex.windows:
        first = min(ex.windows, key=lambda w: w[1])
        ex.zoom_anchor_s, ex.zoom_what = first[1], f"the start of run {first[0] + 1}"
    elif ex.idles:
        ex.zoom_anchor_s, ex.zoom_what = ex.idles[0][1], "the end of the idle span"
    if ex.zoom_anchor_s is not None:
        _read_zoom(ex, ex.zoom_anchor_s, reader, pyjls, sigs, power, cur, vol)
    return ex


def _trace_rate(reader: Any, file_rate: float, windows: list[dict]) -> float:
    """The exact sample rate: the rig's user data, else the windows' own, else the header's.

    JLS headers hold whole hertz; the rig writes the instrument's fractional rate as user data.
    """
    exact: list[float] = []

    def on_user_data(_meta: int, data: Any) -> bool:
        if isinstance(data, dict) and _num(data.get("sample_rate_hz")):
            exact.append(float(data["sample_rate_hz"]))
        return False

    try:
        reader.user_data(on_user_data)
    except Exception:  # user data is a nicety; the header and the windows still give a rate
        exact.clear()
    if exact and exact[0] > 0 and round(exact[0]) == round(file_rate):
        return exact[0]
    for w in windows:
        s0, s1, dur = (_num(w.get(k)) for k in ("start_sample", "end_sample", "duration_s"))
        if s0 is not None and s1 is not None and dur and s1 > s0:
            return (s1 - s0) / dur
    return file_rate


def _voltage_means(reader: Any, vol: Any, start: int, n: int, inc: int) -> np.ndarray:
    """Mean voltage per bin (as `_stats`): the file's signal, or the set value (a float) of a
    trace that stores none."""
    if isinstance(vol, float):
        return np.full(-(-n // inc), vol)
    return _stats(reader, vol.signal_id, start, n, inc)[:, 0]


def _stats(reader: Any, signal_id: int, start: int, n: int, inc: int) -> np.ndarray:
    """[mean, std, min, max] per bin of `inc` samples over [start, start + n), last bin partial."""
    full = n // inc
    parts = []
    if full:
        parts.append(np.asarray(reader.fsr_statistics(signal_id, start, inc, full), np.float64))
    if n - full * inc:
        tail = reader.fsr_statistics(signal_id, start + full * inc, n - full * inc, 1)
        parts.append(np.asarray(tail, np.float64).reshape(1, 4))
    return np.concatenate(parts, axis=0)


def _read_zoom(ex: _Excerpt, anchor_s: float, reader: Any, pyjls: Any, sigs: dict,
               power: Any, cur: Any, vol: Any) -> None:
    anchor = round(anchor_s * ex.rate)  # ex.zoom_anchor_s
    half = max(10, round(ZOOM_S / 2 * ex.rate))
    lo, hi = max(0, anchor - half), min(ex.samples, anchor + half)
    count = hi - lo
    if count < 2:
        return
    ex.zoom_span_s = count / ex.rate
    if count > ZOOM_RAW_MAX:  # a fast instrument: 0.1 s is too many points for a step plot
        inc = math.ceil(count / 2000)
        if power is not None:
            st = _stats(reader, power.signal_id, lo, count, inc)
            ex.zoom_p, ex.zoom_lo, ex.zoom_hi = st[:, 0], st[:, 2], st[:, 3]
        else:
            ist = _stats(reader, cur.signal_id, lo, count, inc)
            v = _voltage_means(reader, vol, lo, count, inc)
            ex.zoom_p, ex.zoom_lo, ex.zoom_hi = ist[:, 0] * v, ist[:, 2] * v, ist[:, 3] * v
        first = lo + np.arange(len(ex.zoom_p)) * inc
        ex.zoom_t = (first + inc / 2.0 - anchor) / ex.rate
        return
    if power is not None:
        ex.zoom_p = np.asarray(reader.fsr(power.signal_id, lo, count), np.float64)
    else:
        volts = (np.full(count, vol) if isinstance(vol, float)
                 else np.asarray(reader.fsr(vol.signal_id, lo, count), np.float64))
        ex.zoom_p = np.asarray(reader.fsr(cur.signal_id, lo, count), np.float64) * volts
    ex.zoom_t = (np.arange(lo, hi) - anchor) / ex.rate
    gpio = sigs.get("gpi0") or sigs.get("gpi[0]")
    if gpio is not None and gpio.length >= hi:
        if gpio.data_type == pyjls.DataType.U8:
            ex.zoom_gpio = np.asarray(reader.fsr(gpio.signal_id, lo, count)).astype(np.uint8) & 1
        elif gpio.data_type == pyjls.DataType.U1:  # packed bits: read from a byte boundary
            start = lo - lo % 8
            packed = np.asarray(reader.fsr(gpio.signal_id, start, hi - start), np.uint8)
            bits = np.unpackbits(packed, bitorder="little")
            ex.zoom_gpio = bits[lo - start : lo - start + count]


def _trace_figure(run: AscRunInput, ex: _Excerpt, path: Path, label: str | None) -> FigureFile:
    fig = _figure(TRACE_HEIGHT_IN)
    zoom_t, zoom_p = ex.zoom_t, ex.zoom_p
    zoomed = zoom_t is not None and zoom_p is not None
    axes = fig.subplots(2, 1, height_ratios=(1.35, 1)) if zoomed else [fig.subplots()]
    top = axes[0]
    _style(top)
    blue, idle_c, win_c = PALETTE[0], PALETTE[2], PALETTE[1]
    top.fill_between(ex.t_bins, ex.p_min, ex.p_max, color=blue, alpha=0.3, linewidth=0,
                     label="min/max per bin")
    top.plot(ex.t_bins, ex.p_mean, color=blue, linewidth=0.8, label="mean per bin")
    text_at = blended_transform_factory(top.transData, top.transAxes)
    for t0, t1 in ex.idles:
        top.axvspan(t0, t1, color=idle_c, alpha=0.2, linewidth=0)
        top.text((t0 + t1) / 2, 0.97, "idle", transform=text_at, ha="center", va="top",
                 fontsize=7, color="#1b6e1b")
    for index, t0, t1 in ex.windows:
        top.axvspan(t0, t1, color=win_c, alpha=0.16, linewidth=0)
        top.text((t0 + t1) / 2, 0.97, f"run {index + 1}", transform=text_at, ha="center",
                 va="top", fontsize=7, color="#a0520a")
    top.set_xlim(0, ex.samples / ex.rate)
    _power_ylim(top, ex.p_min, ex.p_max, headroom=1.15)
    top.xaxis.set_major_formatter(EngFormatter(unit="s"))
    top.yaxis.set_major_formatter(EngFormatter(unit="W"))
    top.set_ylabel("power")
    top.set_xlabel("time since the recording started", labelpad=1)
    top.set_title("whole recording", fontsize=8, loc="left", color="#444444")
    handles = [Line2D([], [], color=blue, linewidth=0.8, label="mean"),
               Patch(color=blue, alpha=0.3, linewidth=0, label="min/max"),
               Patch(color=idle_c, alpha=0.25, linewidth=0, label="idle span"),
               Patch(color=win_c, alpha=0.25, linewidth=0, label="energy window")]
    if not ex.idles:
        handles.remove(handles[2])
    if not ex.windows:
        handles.remove(handles[-1])
    _legend_above(top, handles, [str(h.get_label()) for h in handles])

    if zoom_t is not None and zoom_p is not None:  # zoomed
        ax = axes[1]
        _style(ax)
        if ex.zoom_lo is not None and ex.zoom_hi is not None:
            ax.fill_between(zoom_t, ex.zoom_lo, ex.zoom_hi, color=blue, alpha=0.3,
                            linewidth=0)
            ax.plot(zoom_t, zoom_p, color=blue, linewidth=0.8, label="power (binned)")
        else:
            ax.step(zoom_t, zoom_p, where="post", color=blue, linewidth=0.9,
                    label="power samples")
        ax.axvline(0.0, color="#333333", linestyle="--", linewidth=0.9, label=ex.zoom_what)
        ax.set_xlim(zoom_t[0], zoom_t[-1])
        _power_ylim(ax, zoom_p if ex.zoom_lo is None else ex.zoom_lo,
                    zoom_p if ex.zoom_hi is None else ex.zoom_hi, headroom=1.15)
        ax.xaxis.set_major_formatter(EngFormatter(unit="s"))
        ax.yaxis.set_major_formatter(EngFormatter(unit="W"))
        ax.set_ylabel("power")
        ax.set_title(f"zoom on {ex.zoom_what}", fontsize=8, loc="left", color="#444444")
        ax.set_xlabel(f"time from {ex.zoom_what} (1 sample = {_eng(1 / ex.rate, 's')})",
                      labelpad=1)
        handles, labels = ax.get_legend_handles_labels()
        if ex.zoom_gpio is not None:
            # The DUT's timestamp line, on its own scale: it explains where the window starts.
            g = ax.twinx()
            g.step(zoom_t, ex.zoom_gpio, where="post", color="#777777", linewidth=0.8)
            g.set_ylim(-0.15, 4.5)  # keeps the line in the lower part, clear of the power
            g.set_yticks([0, 1])
            g.tick_params(labelsize=7, colors="#777777", length=2)
            g.set_ylabel("gpi0 bit 0", fontsize=7, color="#777777")
            for side in ("top", "left", "bottom"):
                g.spines[side].set_visible(False)
            g.spines["right"].set_color("#aaaaaa")
            handles.append(Line2D([], [], color="#777777", linewidth=0.8))
            labels.append("timestamp line (gpi0)")
        _legend_above(ax, handles, labels)

    caption = (
        f"Power of run {run.name} over the whole recording ({_eng(ex.samples / ex.rate, 's')} at "
        f"{_eng(ex.rate, 'Hz')}; min/max envelope and mean per bin of {ex.bin_samples} samples)"
        + (f", with the idle span and the {len(ex.windows)} energy windows shaded"
           if ex.windows else "")
        + "."
    )
    if zoomed:
        kind = "binned samples" if ex.zoom_lo is not None else "raw samples"
        caption += (f" Below: {kind} over {_eng(ex.zoom_span_s, 's')} around "
                    f"{ex.zoom_what} (dashed line).")
    if ex.derived:
        caption += " The file has no power signal: power is current times the bin's mean voltage."
    _save(fig, path, f"Power trace — {run.name}", label)
    return FigureFile("asc-trace", path, caption)


def _legend_above(ax: Axes, handles: list[Any], labels: list[str]) -> None:
    """One row above the panel, right-aligned: never over a trace, whatever its shape."""
    ax.legend(handles, labels, fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0),
              ncols=len(handles), frameon=False, borderaxespad=0.15, handlelength=1.6,
              columnspacing=1.2)


def _power_ylim(ax: Axes, lo: np.ndarray, hi: np.ndarray, headroom: float) -> None:
    """From 0 (power is never negative; a floating baseline would exaggerate steps)."""
    finite_lo, finite_hi = lo[np.isfinite(lo)], hi[np.isfinite(hi)]
    if not finite_hi.size:
        return
    top = float(finite_hi.max())
    bottom = min(0.0, float(finite_lo.min())) if finite_lo.size else 0.0
    if top <= bottom:
        top = bottom + 1e-3
    ax.set_ylim(bottom, bottom + (top - bottom) * headroom)


def _per_run_series(runs: Sequence[AscRunInput], key: str, value: str,
                    median: str) -> list[tuple[str, np.ndarray, float]]:
    """Per run: its values in order and its stored median (computed when missing)."""
    out = []
    for run in runs:
        vals = _values(_measurements(run.show)[key], value)
        if not vals.size:
            continue
        med = _num(_summary(run.show).get(median))
        out.append((run.name, vals, float(np.median(vals)) if med is None else med))
    return out


def _dot_plot(ax: Axes, series: list[tuple[str, np.ndarray, float]], unit: str,
              point: str) -> str:
    """Values per run (markers) with each run's median (dashed), on an honest y range.

    Several runs: markers offset a little per run and the legend outside, right.
    Returns a sentence for the caption saying how the y axis was scaled.
    """
    k = len(series)
    width = max(len(v) for _, v, _ in series)
    for i, (name, vals, med) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        x = np.arange(1, len(vals) + 1) + (i - (k - 1) / 2) * min(0.12, 0.5 / k)
        ax.plot(x, vals, linestyle="none", marker=MARKERS[i % len(MARKERS)], markersize=5,
                color=color, markeredgecolor="white", markeredgewidth=0.5,
                label=name if k > 1 else point)
        # no label (not even None, which matplotlib's types refuse) when the legend is per series
        median_label: dict[str, Any] = {"label": f"median {_eng(med, unit)}"} if k == 1 else {}
        ax.hlines(med, 0.6, width + 0.4, colors=color, linestyles="--", linewidth=1.0,
                  **median_label)
    if k == 1:
        _legend(ax, loc="best")
    else:
        handles = ax.get_legend_handles_labels()[0]
        handles.append(Line2D([], [], color="#555555", linestyle="--", linewidth=1.0,
                              label="median of the run"))
        _series_legend(ax, "run", handles)
    everything = np.concatenate([v for _, v, _ in series] + [[m for *_, m in series]])
    lo, hi = float(everything.min()), float(everything.max())
    # At least +-10 % around the data: run-to-run noise of 0.1 % must not look like a cliff.
    if lo > 0 and lo >= 0.5 * hi:
        ax.set_ylim(lo * 0.9, hi * 1.1)
        scale = "The y axis spans the data plus 10 % either side; it does not start at zero."
    else:
        ax.set_ylim(min(0.0, lo * 1.1), hi * 1.15 if hi > 0 else 1.0)
        scale = "The y axis starts at zero."
    ax.set_xlim(0.5, width + 0.5)
    ax.xaxis.set_major_locator(FixedLocator(range(1, width + 1)))
    ax.yaxis.set_major_formatter(_axis_formatter(unit))
    ax.yaxis.set_major_locator(MaxNLocator(6))
    return scale


@dataclass(frozen=True)
class _DotFigure:
    """One value per timed run or window, with each run's median: what differs per figure."""

    key: str
    group: str  # "latency_runs" or "energy_windows"
    field: str  # the per-run value, also the summary's median key
    unit: str
    xlabel: str
    ylabel: str
    legend: str
    title: str
    what: str  # the caption's first words


_THROUGHPUT = _DotFigure("asc-throughput", "latency_runs", "inferences_per_s", RATE_UNIT,
                         "timed run", "throughput", "each timed run", "Throughput per timed run",
                         "Inferences per second in each timed run, with the median over the runs")
_ENERGY = _DotFigure("asc-energy", "energy_windows", "energy_per_inference_j", "J",
                     "energy window", "energy per inference", "each window",
                     "Energy per inference per window",
                     "Energy per inference in each measurement window (window energy over its "
                     "iterations), with the median over the windows")


def _dot_figure(spec: _DotFigure, runs: list[AscRunInput], out_dir: Path, prefix: str,
                label: str | None) -> FigureFile | None:
    series = _per_run_series(runs, spec.group, spec.field, spec.field)
    if not series:
        return None
    fig = _figure()
    ax = fig.subplots()
    _style(ax)
    scale = _dot_plot(ax, series, spec.unit, spec.legend)
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel)
    path = out_dir / f"{prefix}-{spec.key}.png"
    meds = ", ".join(f"{_eng(m, spec.unit)}" + (f" ({n})" if len(series) > 1 else "")
                     for n, _, m in series)
    caption = f"{spec.what} (dashed; {meds}). {scale}"
    _save(fig, path, spec.title, label)
    return FigureFile(spec.key, path, caption)


def _deviations(vals: np.ndarray) -> np.ndarray:
    """Relative deviation from the mean, as the rig's replicability check computes it."""
    mean = float(vals.mean())
    if mean == 0:
        return np.where(vals == 0, 0.0, np.inf)
    return (vals - mean) / abs(mean)


def _replicability_figure(runs: list[AscRunInput], out_dir: Path, prefix: str,
                          label: str | None, tolerance: float) -> FigureFile | None:
    groups: list[tuple[int, str, str, np.ndarray]] = []  # run number, run name, quantity, devs
    for i, run in enumerate(runs):
        meas = _measurements(run.show)
        ips = _values(meas["latency_runs"], "inferences_per_s")
        epi = _values(meas["energy_windows"], "energy_per_inference_j")
        if ips.size:
            groups.append((i, run.name, "inferences/s", _deviations(ips)))
        if epi.size:
            groups.append((i, run.name, "energy per inference", _deviations(epi)))
    if not groups:
        return None
    fig = _figure()
    ax = fig.subplots()
    _style(ax)
    tol = abs(tolerance)
    ax.axhspan(-tol, tol, color=PALETTE[2], alpha=0.12, linewidth=0)
    for edge in (-tol, tol):
        ax.axhline(edge, color=PALETTE[2], linestyle="--", linewidth=0.9)
    ax.axhline(0.0, color="#888888", linewidth=0.6)
    k = len(groups)
    width = max(len(d) for *_, d in groups)
    step = min(0.12, 0.6 / k)
    finite = np.concatenate([d[np.isfinite(d)] for *_, d in groups])
    worst = float(np.max(np.abs(finite))) if finite.size else 0.0
    lim = max(1.6 * tol, 1.15 * worst)
    several = len({g[0] for g in groups}) > 1
    handles: list[Any] = []
    for j, (i, name, what, devs) in enumerate(groups):
        color = PALETTE[i % len(PALETTE)]
        marker = "o" if what == "inferences/s" else "s"
        x = np.arange(1, len(devs) + 1) + (j - (k - 1) / 2) * step
        y = np.clip(devs, -lim, lim)  # an infinite deviation sits on the frame, still red
        out = np.abs(devs) > tol
        face = np.where(out, RED, color)
        ax.scatter(x, y, s=26, marker=marker, c=list(face), edgecolors="white",
                   linewidths=0.5, zorder=3)
        if several and not any(h.get_label() == name for h in handles):
            handles.append(Patch(color=color, label=name))
        if not several:
            handles.append(Line2D([], [], linestyle="none", marker=marker, color=color,
                                  markeredgecolor="white", markersize=5.5, label=what))
    if several:  # colour says the run, the marker says the quantity
        handles += [Line2D([], [], linestyle="none", marker=m, color="#555555", markersize=5.5,
                           label=what)
                    for m, what in (("o", "inferences/s"), ("s", "energy per inference"))
                    if any(g[2] == what for g in groups)]
    if any((np.abs(d) > tol).any() for *_, d in groups):
        handles.append(Line2D([], [], linestyle="none", marker="o", color=RED,
                              markersize=5.5, label="outside the band"))
    handles.append(Patch(facecolor=PALETTE[2], alpha=0.25, edgecolor=PALETTE[2],
                         linestyle="--", label=f"±{_pct(tol)} tolerance"))
    ax.set_ylim(-lim, lim)
    ax.set_xlim(0.5, width + 0.5)
    ax.xaxis.set_major_locator(FixedLocator(range(1, width + 1)))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0 if lim >= 0.03 else None))
    ax.set_xlabel("timed run / energy window")
    ax.set_ylabel("deviation from the mean")
    if several:
        _series_legend(ax, "run", handles)
    else:
        ax.legend(handles=handles, fontsize=7.5, loc="best", frameon=True, framealpha=0.9,
                  edgecolor="#cccccc", ncols=min(len(handles), 3))
    path = out_dir / f"{prefix}-asc-replicability.png"
    worst_by: dict[str, float] = {}
    for _, _, what, devs in groups:
        worst_by[what] = max(worst_by.get(what, 0.0), float(np.max(np.abs(devs))))
    worst_txt = "; ".join(f"{what} {_pct(dev)}" for what, dev in worst_by.items())
    caption = (f"Deviation of each timed run's inferences/s and each window's energy per "
               f"inference from their run's mean (x/mean − 1), against the ±{_pct(tol)} "
               f"replicability band; largest deviation: {worst_txt}. Points outside the band "
               f"are red.")
    _save(fig, path, "Replicability: each run against the tolerance band", label)
    return FigureFile("asc-replicability", path, caption)


# -- QUBO ----------------------------------------------------------------------------------------


def qubo_figures(sut: str, sweeps: list[SweepInput], out_dir: Path, prefix: str, *,
                 label: str | None = None) -> list[FigureFile]:
    """The QUBO figures of one SUT: qubo-gap, qubo-power, qubo-tts and qubo-largest.

    Each sweep that has rows for `sut` is its own series; figures without data are left out.
    """
    out_dir = Path(out_dir)
    data = [_SweepRows(s.name, rows, s.show) for s in sweeps
            if (rows := [r for r in s.show.get("summary") or []
                         if isinstance(r, dict) and r.get("sut") == sut])]
    files: list[FigureFile] = []
    for make in (_gap_figure, _power_figure, _tts_figure, _largest_figure):
        made = make(sut, data, out_dir, prefix, label)
        if made is not None:
            files.append(made)
    return files


@dataclass(frozen=True)
class _SweepRows:
    name: str
    rows: list[dict]
    show: dict


def _sizes(count: int, big: float = 9.0, small: float = 4.5) -> list[float]:
    """Sizes from big to small. Hollow markers of falling size nest inside each other, so
    points that coincide (every size at gap 0, say) all stay visible without moving them."""
    if count <= 1:
        return [5.0] * count
    return list(np.linspace(big, small, count))


def _against_timeout(data: list[_SweepRows], value: str, path: Path, title: str,
                     label: str | None, *, gap: bool) -> bool:
    """Panels per density, one line per workload size (and per sweep), `value` against timeout.

    Returns False (nothing written) when no row has a point to plot.
    """
    # (density, sweep, nodes) -> [(timeout, value)]: only rows with everything a point needs.
    points: dict[tuple[float, int, int], list[tuple[float, float]]] = {}
    for s, sw in enumerate(data):
        for r in sw.rows:
            d, n, t, v = (_num(r.get(k)) for k in ("density", "nodes", "timeout_s", value))
            if d is not None and n is not None and t is not None and t > 0 and v is not None:
                points.setdefault((d, s, int(n)), []).append((t, v))
    if not points:
        return False
    densities = sorted({k[0] for k in points})
    nodes = sorted({k[2] for k in points})
    fig = _figure()
    axes = fig.subplots(1, len(densities), sharey=True, squeeze=False)[0]
    several = len(data) > 1
    sizes = _sizes(len(nodes) * len(data))
    widths = _sizes(len(nodes) * len(data), 2.0, 1.0)
    handles: dict[str, Any] = {}
    values = np.array([v for pts in points.values() for _, v in pts])
    ymax, ymin = max(0.0, float(values.max())), min(0.0, float(values.min()))
    for ax, density in zip(axes, densities, strict=True):
        _style(ax)
        ax.set_xscale("log")
        for s in range(len(data)):
            for c, n in enumerate(nodes):
                pts = sorted(points.get((density, s, n), []))
                if not pts:
                    continue
                t, v = np.array(pts).T
                tag = f"{n} nodes"
                k = s * len(nodes) + c
                (line,) = ax.plot(
                    t, v, color=PALETTE[c % len(PALETTE)], linestyle=LINESTYLES[s % 4],
                    marker=MARKERS[c % len(MARKERS)], markersize=sizes[k], linewidth=widths[k],
                    markerfacecolor="none", markeredgewidth=1.3, label=tag)
                handles.setdefault(tag, line)
        ax.set_title(f"density {density:g}", fontsize=8.5)
        ax.xaxis.set_major_formatter(EngFormatter(unit="s"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("timeout")
        if gap:
            _gap_targets(ax, last=ax is axes[-1])
    ax0 = axes[0]
    if gap:
        # symlog: linear through 0 (the BKS, and any gap below it), logarithmic above 1 %, so
        # the 1 %, 5 % and 10 % targets and gaps of 70 % are all legible on one axis.
        lo, hi = min(-0.004, ymin * 1.5), max(0.15, ymax) * 1.6
        ax0.set_yscale("symlog", linthresh=0.01, linscale=0.8)
        ax0.set_ylim(lo, hi)
        ticks = (-1, -0.1, -0.01, 0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
        ax0.yaxis.set_major_locator(FixedLocator([v for v in ticks if lo <= v <= hi]))
        ax0.yaxis.set_minor_locator(NullLocator())
        ax0.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax0.set_ylabel("optimality gap to the BKS")
    else:
        ax0.set_ylim(0, ymax * 1.15 if ymax > 0 else 1.0)
        ax0.yaxis.set_major_formatter(EngFormatter(unit="W"))
        ax0.set_ylabel("average power")
    legend = [Line2D([], [], color=h.get_color(), marker=h.get_marker(), markersize=6,
                     markerfacecolor="none", markeredgewidth=1.2, linewidth=1.2, label=tag)
              for tag, h in handles.items()]
    if several:  # colour and marker say the size, the line style says the sweep
        legend += [Line2D([], [], color="#555555", linestyle=LINESTYLES[s % len(LINESTYLES)],
                          linewidth=1.0, label=sw.name) for s, sw in enumerate(data)]
    # With the gap targets named right of the panel, the legend moves out past them.
    _series_legend(axes[-1], "workload", legend, x=1.13 if gap else 1.02)
    _save(fig, path, title, label)
    return True


def _gap_targets(ax: Axes, last: bool) -> None:
    """The NeuroBench targets: the BKS (gap 0) and the time-to-solution thresholds."""
    ax.axhline(0.0, color="#222222", linewidth=0.9, zorder=1)
    for thr in GAP_THRESHOLDS:
        ax.axhline(thr, color="#999999", linewidth=0.7, linestyle=(0, (4, 3)), zorder=1)
    if last:  # named once, just right of the last panel, where no data can be
        at = blended_transform_factory(ax.transAxes, ax.transData)
        ax.text(1.01, 0.0, "BKS", transform=at, fontsize=6.5, color="#222222", va="center",
                ha="left", clip_on=False)
        for thr in GAP_THRESHOLDS:
            ax.text(1.01, thr, f"{thr:.0%}", transform=at, fontsize=6.5, color="#666666",
                    va="center", ha="left", clip_on=False)


def _gap_figure(sut: str, data: list[_SweepRows], out_dir: Path, prefix: str,
                label: str | None) -> FigureFile | None:
    path = out_dir / f"{prefix}-qubo-gap.png"
    if not _against_timeout(data, "gap_mean", path, f"Optimality gap against timeout — {sut}",
                            label, gap=True):
        return None
    caption = ("Mean optimality gap to the best known solution (BKS) over the seeds, against the "
               "solver timeout, per workload size and graph density; the solid line is the BKS "
               "(gap 0), the dashed lines the time-to-solution thresholds 10 %, 5 % and 1 % "
               "(y axis linear below 1 %, logarithmic above).")
    return FigureFile("qubo-gap", path, caption)


def _power_figure(sut: str, data: list[_SweepRows], out_dir: Path, prefix: str,
                  label: str | None) -> FigureFile | None:
    path = out_dir / f"{prefix}-qubo-power.png"
    if not _against_timeout(data, "power_w_mean", path, f"Average power against timeout — {sut}",
                            label, gap=False):
        return None
    caption = ("Average power over the seeds that measured it, against the solver timeout, per "
               "workload size and graph density; points without a power reading are left out.")
    return FigureFile("qubo-power", path, caption)


def _float_or_none(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _log_ticks(ax: Axes, values: np.ndarray, unit: str) -> None:
    """Labelled ticks on a log axis that spans anything from a fraction of a decade to many."""
    values = values[np.isfinite(values) & (values > 0)]
    decades = math.log10(values.max() / values.min()) if values.size else 1.0
    if decades < 0.7:  # every 1..9 mantissa, or a single tick would be left
        subs: tuple[float, ...] = tuple(float(k) for k in range(1, 10))
    elif decades < 3:
        subs = (1.0, 2.0, 5.0)
    else:
        subs = (1.0,)
    ax.yaxis.set_major_locator(LogLocator(subs=subs))
    ax.yaxis.set_major_formatter(EngFormatter(unit=unit))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _tts_figure(sut: str, data: list[_SweepRows], out_dir: Path, prefix: str,
                label: str | None) -> FigureFile | None:
    # (sweep, threshold, density) -> [(nodes, latency, reached, seeds)], at the longest timeout
    series: dict[tuple[int, float, float], list[tuple[float, float, int, int]]] = {}
    longest_by: set[float] = set()
    for s, sw in enumerate(data):
        timeouts = [t for r in sw.rows if (t := _num(r.get("timeout_s"))) is not None]
        if not timeouts:
            continue
        longest = max(timeouts)
        longest_by.add(longest)
        for r in sw.rows:
            n, d = _num(r.get("nodes")), _num(r.get("density"))
            tts = r.get("tts")
            if _num(r.get("timeout_s")) != longest or n is None or d is None:
                continue
            for key, hit in (tts.items() if isinstance(tts, dict) else ()):
                thr = _float_or_none(key)
                if thr is None or not isinstance(hit, dict):
                    continue
                lat, reached = _num(hit.get("latency_s_mean")), int(_num(hit.get("reached")) or 0)
                if reached > 0 and lat is not None and lat > 0:
                    seeds = int(_num(r.get("seeds")) or reached)
                    series.setdefault((s, thr, d), []).append((n, lat, reached, seeds))
    if not series:
        return None
    fig = _figure()
    ax = fig.subplots()
    _style(ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    thresholds = sorted({k[1] for k in series}, reverse=True)
    densities = sorted({k[2] for k in series})
    several = len(data) > 1
    # Loosest threshold drawn biggest: reaching 1 % implies reaching 5 % at the same instant,
    # so those points often coincide and must nest, not hide each other.
    sizes, widths = _sizes(len(thresholds)), _sizes(len(thresholds), 2.0, 1.0)
    partial = False
    for (s, thr, d), pts in sorted(series.items(), key=lambda kv: (kv[0][0], -kv[0][1],
                                                                   kv[0][2])):
        pts.sort()
        nodes, lats = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        ti, di = thresholds.index(thr), densities.index(d)
        color = PALETTE[ti % len(PALETTE)]
        # Colour: threshold; marker: density; line style: density, or the sweep if several.
        style = LINESTYLES[(s if several else di) % len(LINESTYLES)]
        ax.plot(nodes, lats, color=color, marker=MARKERS[di % len(MARKERS)], linestyle=style,
                linewidth=widths[ti], markersize=sizes[ti], markerfacecolor="none",
                markeredgewidth=1.3)
        for x, y, reached, seeds in pts:
            if reached < seeds:  # a mean over fewer seeds than ran: say how many
                partial = True
                ax.annotate(f"{reached}/{seeds}", (x, y), textcoords="offset points",
                            xytext=(5, -3 - 7 * ti), fontsize=6, color=color)
    all_nodes = sorted({p[0] for pts in series.values() for p in pts})
    ax.xaxis.set_major_locator(FixedLocator(all_nodes))
    ax.xaxis.set_major_formatter(EngFormatter(places=0))
    ax.xaxis.set_minor_locator(NullLocator())
    _log_ticks(ax, np.array([p[1] for pts in series.values() for p in pts]), "s")
    ax.set_xlabel("workload size (nodes)")
    ax.set_ylabel("time to solution")
    if len(all_nodes) == 1:
        ax.set_xlim(all_nodes[0] / 1.5, all_nodes[0] * 1.5)
    else:
        ax.set_xlim(all_nodes[0] / 1.15, all_nodes[-1] * 1.15)
    grey = "#555555"
    handles = [Line2D([], [], color=PALETTE[i % len(PALETTE)], linewidth=1.6,
                      label=f"gap ≤ {thr:.0%}") for i, thr in enumerate(thresholds)]
    handles += [Line2D([], [], color=grey, marker=MARKERS[i % len(MARKERS)],
                       markerfacecolor="none", markeredgewidth=1.2,
                       linestyle="none" if several else LINESTYLES[i % len(LINESTYLES)],
                       linewidth=1.0, label=f"density {d:g}") for i, d in enumerate(densities)]
    if several:
        handles += [Line2D([], [], color=grey, linestyle=LINESTYLES[s % len(LINESTYLES)],
                           linewidth=1.0, label=sw.name) for s, sw in enumerate(data)]
    _series_legend(ax, "threshold, density", handles)
    longest_txt = ", ".join(_eng(t, "s") for t in sorted(longest_by))
    caption = (f"Mean time to reach each gap threshold, over the seeds that reached it, at the "
               f"longest timeout ({longest_txt}), against workload size; thresholds that no "
               f"seed reached are not plotted.")
    if partial:
        caption += " Labels k/n mark points where only k of the n seeds reached the threshold."
    path = out_dir / f"{prefix}-qubo-tts.png"
    _save(fig, path, f"Time to solution — {sut}", label)
    return FigureFile("qubo-tts", path, caption)


def _largest_figure(sut: str, data: list[_SweepRows], out_dir: Path, prefix: str,
                    label: str | None) -> FigureFile | None:
    bars: list[tuple[str, int | None]] = []
    timeouts: set[float] = set()
    tried: set[int] = set()
    several = len(data) > 1
    for sw in data:
        entries = [e for e in sw.show.get("largest_solved") or []
                   if isinstance(e, dict) and e.get("sut") == sut
                   and _num(e.get("density")) is not None]
        nodes = (sw.show.get("sweep") or {}).get("nodes") or []
        tried |= {int(n) for n in nodes if _num(n) is not None}
        for e in sorted(entries, key=lambda e: e["density"]):
            n = _num(e.get("nodes"))
            if (t := _num(e.get("timeout_s"))) is not None:
                timeouts.add(t)
            bars.append((f"density {e['density']:g}" + (f"\n{sw.name}" if several else ""),
                         None if n is None else int(n)))
    if not bars:
        return None
    fig = _figure()
    ax = fig.subplots()
    _style(ax)
    ax.grid(False, axis="y")
    y = np.arange(len(bars))[::-1]  # first density on top
    widths = [0 if n is None else n for _, n in bars]
    rects = ax.barh(y, widths, height=0.5, color=PALETTE[0])
    ax.bar_label(rects, labels=["none" if n is None else f"{n} nodes" for _, n in bars],
                 padding=4, fontsize=8)
    ax.set_yticks(y, [b[0] for b in bars])
    top = max([*widths, *tried, 1])
    ax.set_xlim(0, top * 1.18)
    ax.set_ylim(-0.7, len(bars) - 0.3)
    if tried:  # the sizes the sweep tried: the answer is one of them
        ax.xaxis.set_major_locator(FixedLocator([0, *sorted(tried)]))
        ax.set_xlabel("workload size (nodes); ticks at the sizes the sweep tried")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.set_xlabel("workload size (nodes)")
    tout = ", ".join(_eng(t, "s") for t in sorted(timeouts)) or "the longest timeout"
    caption = (f"Largest workload size (nodes) of the sweep for which every seed found a cost "
               f"better than 0 at the longest timeout ({tout}), per graph density; 'none' where "
               f"not even the smallest size did.")
    path = out_dir / f"{prefix}-qubo-largest.png"
    _save(fig, path, f"Largest workload solved — {sut}", label)
    return FigureFile("qubo-largest", path, caption)
