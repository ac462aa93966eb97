//! `cairn-bench-plot`: SVG plots of the JSON a benchmark part wrote (`--json` or
//! `--json-out`), so a person can look at the results instead of reading tables.
//!
//! ```text
//! cairn-bench-plot [--part NAME] [--out DIR] FILE.json
//! ```
//!
//! The part (`ckpt`, `redundancy`, `nbody`, `flush`, `reduce`, `incremental`, `fs`,
//! `transparent`, `launch`, `peers`) is recognised from the JSON's keys unless `--part` names it. Each
//! figure is written to `DIR/<part>-<what>.svg` and its path printed. Every timed series is
//! drawn as its median (a bar or a point) with the spread of its samples (fastest .. slowest
//! run) as an error bar; baselines measured in the same run are drawn next to Cairn, targets
//! as red dashed lines and fitted models as dashed lines. `bench/run.sh` runs this after every
//! part; `bench/README.md` shows the plots.
//!
//! The SVG backend writes text as SVG `<text>` elements (sans-serif), laid out with estimated
//! widths: no fonts are read and no C library is needed.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const PROG: &str = "cairn-bench-plot";
const USAGE: &str = "\
usage: cairn-bench-plot [options] FILE.json
  --part NAME   the benchmark part that wrote FILE: ckpt, redundancy, nbody, flush, reduce,
                incremental, fs, transparent, launch or peers (default: recognised from its
                keys)
  --out DIR     where the SVG files go, named <part>-<what>.svg (default: the directory of
                FILE, plots/)";

const PARTS: [&str; 10] = [
    "ckpt",
    "redundancy",
    "nbody",
    "flush",
    "reduce",
    "incremental",
    "fs",
    "transparent",
    "launch",
    "peers",
];

type Error = Box<dyn std::error::Error>;
type Res<T> = Result<T, Error>;

const MIB: f64 = 1048576.0;

// ---- arguments ---------------------------------------------------------------------------

#[derive(Debug, PartialEq)]
struct Args {
    file: PathBuf,
    part: Option<String>,
    out: Option<PathBuf>,
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let (mut file, mut part, mut out) = (None, None, None);
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--part" => {
                let v = value()?;
                if !PARTS.contains(&v.as_str()) {
                    return Err(format!(
                        "--part {v:?}: expected one of {}",
                        PARTS.join(", ")
                    ));
                }
                part = Some(v);
            }
            "--out" => out = Some(PathBuf::from(value()?)),
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(format!("unknown argument {arg:?}"))
            }
            _ if file.is_none() => file = Some(PathBuf::from(arg)),
            _ => return Err(format!("one JSON file at a time ({arg:?} is a second one)")),
        }
    }
    let file = file.ok_or("no JSON file given")?;
    Ok(Some(Args { file, part, out }))
}

// ---- statistics --------------------------------------------------------------------------

/// A series as plotted: the median, and the fastest and slowest sample (or the median alone).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    med: f64,
    lo: f64,
    hi: f64,
}

impl Stat {
    fn point(v: f64) -> Stat {
        Stat {
            med: v,
            lo: v,
            hi: v,
        }
    }

    /// Median (mean of the middle two for an even count), minimum and maximum of the finite
    /// samples; `None` without any.
    fn of(samples: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let med = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            med,
            lo: v[0],
            hi: v[n - 1],
        })
    }

    fn scale(self, k: f64) -> Stat {
        Stat {
            med: self.med * k,
            lo: self.lo * k,
            hi: self.hi * k,
        }
    }

    /// `amount / t` of a time series, e.g. a bandwidth: the fastest run gives the highest rate.
    fn rate(self, amount: f64) -> Stat {
        Stat {
            med: amount / self.med,
            lo: amount / self.hi,
            hi: amount / self.lo,
        }
    }
}

/// A timed series of a benchmark's JSON (`median_s`, `samples_s`, maybe `min_s` / `max_s`):
/// the median the benchmark printed, with the spread of its samples.
fn series(v: &Value) -> Option<Stat> {
    let samples: Vec<f64> = v
        .get("samples_s")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    let from_samples = Stat::of(&samples);
    let med = v
        .get("median_s")
        .and_then(Value::as_f64)
        .or(from_samples.map(|s| s.med))?;
    let lo = from_samples
        .map(|s| s.lo)
        .or_else(|| v.get("min_s").and_then(Value::as_f64))
        .unwrap_or(med);
    let hi = from_samples
        .map(|s| s.hi)
        .or_else(|| v.get("max_s").and_then(Value::as_f64))
        .unwrap_or(med);
    Some(Stat { med, lo, hi })
}

// ---- reading the JSON --------------------------------------------------------------------

/// `v[key]`, not null.
fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

/// `v[key]`, not null, or an error naming the key.
fn field<'a>(v: &'a Value, key: &str) -> Res<&'a Value> {
    get(v, key).ok_or_else(|| missing(key))
}

/// The error for a key the JSON lacks.
fn missing(key: &str) -> Error {
    format!("no {key:?} in the JSON (written by another version of the benchmark?)").into()
}

/// The number `v[key]`.
fn num(v: &Value, key: &str) -> Res<f64> {
    field(v, key)?
        .as_f64()
        .ok_or_else(|| format!("{key:?} is not a number").into())
}

/// `v[key]` as text: a string as it is, anything else as JSON.
fn text(v: &Value, key: &str) -> Res<String> {
    let f = field(v, key)?;
    Ok(f.as_str().map_or_else(|| f.to_string(), str::to_string))
}

/// The list `v[key]`.
fn arr<'a>(v: &'a Value, key: &str) -> Res<&'a Vec<Value>> {
    field(v, key)?
        .as_array()
        .ok_or_else(|| format!("{key:?} is not a list").into())
}

/// The timed series `v[key]`.
fn stat(v: &Value, key: &str) -> Res<Stat> {
    series(field(v, key)?).ok_or_else(|| format!("{key:?} holds no times").into())
}

/// Which part wrote `v`, from its keys.
fn detect(v: &Value) -> Option<&'static str> {
    let has = |k: &str| v.get(k).is_some();
    let setting = |k: &str| v.get("settings").and_then(|s| s.get(k)).is_some();
    if v.get("program").and_then(Value::as_str) == Some("cairn-bench-reduce") {
        Some("reduce")
    } else if v.get("program").and_then(Value::as_str) == Some("cairn-bench-launch") {
        Some("launch")
    } else if has("fixed_cost") || (has("bandwidth") && has("nodes")) {
        Some("ckpt")
    } else if has("cpex") || has("codec") && has("engine") {
        Some("redundancy")
    } else if has("nbody") {
        Some("nbody")
    } else if (has("app") || has("fit")) && has("global") {
        Some("flush")
    } else if has("rows") && has("block") && has("compress") {
        Some("incremental")
    } else if setting("spill_dir") {
        Some("fs")
    } else if setting("restorer") {
        Some("transparent")
    } else if has("runs") && has("mib_per_rank") {
        Some("peers")
    } else {
        None
    }
}

// ---- figures -----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log,
}

impl Scale {
    /// The value as placed on the axis.
    fn t(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log => v.log10(),
        }
    }

    fn inv(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log => 10f64.powf(v),
        }
    }
}

/// How tick labels read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fmt {
    Num,
    /// Bytes as 4K, 64K, 1M.
    Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Style {
    /// A bar at a group (x = the group's index).
    Bar,
    /// Points with error bars, joined by a thin line.
    Measured,
    /// A dashed line without points: a model or a bound computed from measurements.
    Model,
}

struct Series {
    name: String,
    color: RGBColor,
    style: Style,
    points: Vec<(f64, Stat)>,
}

impl Series {
    fn new(name: impl Into<String>, color: RGBColor, style: Style) -> Series {
        Series {
            name: name.into(),
            color,
            style,
            points: Vec::new(),
        }
    }

    fn at(mut self, x: f64, s: Stat) -> Series {
        self.points.push((x, s));
        self
    }

    fn with(mut self, points: impl IntoIterator<Item = (f64, Stat)>) -> Series {
        self.points.extend(points);
        self
    }
}

/// A horizontal line across a panel: a target or a reference value.
struct HLine {
    name: String,
    y: f64,
    color: RGBColor,
}

enum XAxis {
    /// Categories: groups of bars at x = 0, 1, ...
    Groups(Vec<String>),
    /// A numeric axis; ticks at the data's x values when there are few of them.
    Numeric {
        label: String,
        scale: Scale,
        fmt: Fmt,
    },
}

struct Panel {
    title: String,
    x: XAxis,
    y_label: String,
    y_scale: Scale,
    y_fmt: Fmt,
    /// On a linear axis: start at 0 (always so with bars).
    y_zero: bool,
    series: Vec<Series>,
    lines: Vec<HLine>,
}

impl Panel {
    /// Bars in `groups` on a linear y axis from 0.
    fn bars(title: impl Into<String>, groups: Vec<String>, y_label: impl Into<String>) -> Panel {
        Panel {
            title: title.into(),
            x: XAxis::Groups(groups),
            y_label: y_label.into(),
            y_scale: Scale::Linear,
            y_fmt: Fmt::Num,
            y_zero: true,
            series: Vec::new(),
            lines: Vec::new(),
        }
    }

    /// Points over a numeric x axis, on a linear y axis from 0.
    fn xy(
        title: impl Into<String>,
        x_label: impl Into<String>,
        x_scale: Scale,
        x_fmt: Fmt,
        y_label: impl Into<String>,
    ) -> Panel {
        Panel {
            title: title.into(),
            x: XAxis::Numeric {
                label: x_label.into(),
                scale: x_scale,
                fmt: x_fmt,
            },
            y_label: y_label.into(),
            y_scale: Scale::Linear,
            y_fmt: Fmt::Num,
            y_zero: true,
            series: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn log_y(mut self) -> Panel {
        self.y_scale = Scale::Log;
        self
    }

    fn free_y(mut self) -> Panel {
        self.y_zero = false;
        self
    }

    /// Add a series; one without points is left out (and out of the legend).
    fn add(&mut self, s: Series) {
        if !s.points.is_empty() {
            self.series.push(s);
        }
    }

    /// Add a horizontal line at `y`, unless `y` is not a number.
    fn line(&mut self, name: impl Into<String>, y: f64, color: RGBColor) {
        if y.is_finite() {
            self.lines.push(HLine {
                name: name.into(),
                y,
                color,
            });
        }
    }
}

struct Figure {
    /// The file is `<part>-<name>.svg`.
    name: String,
    title: String,
    /// Settings and headline figures, wrapped under the title.
    subtitle: String,
    cols: usize,
    /// Pixels per panel.
    panel: (u32, u32),
    panels: Vec<Panel>,
}

impl Figure {
    fn new(
        name: impl Into<String>,
        title: impl Into<String>,
        subtitle: impl Into<String>,
    ) -> Figure {
        Figure {
            name: name.into(),
            title: title.into(),
            subtitle: subtitle.into(),
            cols: 1,
            panel: (760, 440),
            panels: Vec::new(),
        }
    }

    /// Lay the panels out `cols` to a row, each `w` x `h` pixels.
    fn grid(mut self, cols: usize, w: u32, h: u32) -> Figure {
        self.cols = cols.max(1);
        self.panel = (w, h);
        self
    }

    /// Add a panel; one without series is left out.
    fn push(&mut self, p: Panel) {
        if !p.series.is_empty() {
            self.panels.push(p);
        }
    }

    /// The figure with these panels added, in order (see [`Figure::push`]).
    fn with(mut self, panels: impl IntoIterator<Item = Panel>) -> Figure {
        for p in panels {
            self.push(p);
        }
        self
    }
}

// ---- colours -----------------------------------------------------------------------------

/// Cairn itself: blue, everywhere.
const CAIRN: RGBColor = RGBColor(31, 119, 180);
/// A second and third Cairn series in one panel.
const CAIRN_2: RGBColor = RGBColor(23, 190, 207);
const CAIRN_3: RGBColor = RGBColor(44, 160, 44);
/// The plain baseline the headline ratio is taken against.
const BASE: RGBColor = RGBColor(110, 110, 110);
const ORANGE: RGBColor = RGBColor(255, 127, 14);
const PURPLE: RGBColor = RGBColor(148, 103, 189);
const BROWN: RGBColor = RGBColor(140, 86, 75);
const PINK: RGBColor = RGBColor(227, 119, 194);
const OLIVE: RGBColor = RGBColor(188, 189, 34);
const LIGHT: RGBColor = RGBColor(170, 170, 170);
/// Targets.
const TARGET: RGBColor = RGBColor(200, 0, 0);
/// Reference lines that are not targets.
const REFERENCE: RGBColor = RGBColor(60, 60, 60);

/// Distinct colours for series without a meaning of their own.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The `i`-th colour of `PALETTE`, cycling.
fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

// ---- axes --------------------------------------------------------------------------------

/// 1, 2 or 5 times a power of ten, near `x`.
fn nice_step(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    let m = x / p;
    p * if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    }
}

/// Tick values (not placed) between `lo` and `hi`.
fn ticks(scale: Scale, lo: f64, hi: f64) -> Vec<f64> {
    let linear = |lo: f64, hi: f64| -> Vec<f64> {
        let step = nice_step(((hi - lo) / 6.0).max(f64::MIN_POSITIVE));
        let mut t = (lo / step).ceil() * step;
        let mut v = Vec::new();
        while t <= hi + step * 1e-9 && v.len() < 50 {
            // Print 0.30000000000000004 as 0.3.
            v.push((t / step).round() * step);
            t += step;
        }
        v
    };
    match scale {
        Scale::Linear => linear(lo, hi),
        Scale::Log => {
            let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
            // 1, 2 and 5 in every decade over a span of a few; the powers of ten alone over more.
            let mults: &[f64] = if (hi / lo).log10() <= 2.5 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let mut v = Vec::new();
            for d in a..=b {
                for m in mults {
                    let t = m * 10f64.powi(d);
                    if t >= lo * (1.0 - 1e-9) && t <= hi * (1.0 + 1e-9) {
                        v.push(t);
                    }
                }
            }
            if (b - a) > 12 {
                v.retain(|t| (t.log10().round() as i32 - a) % 2 == 0);
            }
            if v.len() < 2 {
                linear(lo, hi)
            } else {
                v
            }
        }
    }
}

/// A number as a tick label: no more digits than it needs.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        return "0".into();
    } else if a >= 1e6 {
        format!("{v:.2e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        let digits = (-a.log10()).ceil() as usize + 1;
        format!("{v:.digits$}")
    };
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A size in bytes as a tick label: 4K, 64K, 1M.
fn fmt_bytes(v: f64) -> String {
    for (unit, k) in [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        let k = k as f64;
        if v >= k {
            return format!("{}{unit}", fmt_num(v / k));
        }
    }
    fmt_num(v)
}

/// A tick label in format `f`.
fn fmt(f: Fmt, v: f64) -> String {
    match f {
        Fmt::Num => fmt_num(v),
        Fmt::Bytes => fmt_bytes(v),
    }
}

/// The time unit that suits values up to `max_s` seconds: (factor, name).
fn time_unit(max_s: f64) -> (f64, &'static str) {
    if max_s >= 2.0 {
        (1.0, "s")
    } else if max_s >= 2e-3 {
        (1e3, "ms")
    } else {
        (1e6, "µs")
    }
}

/// The range of an axis holding `values` (already in the axis's units, not placed), padded.
fn range(scale: Scale, values: &[f64], zero: bool) -> (f64, f64) {
    let v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite() && (scale == Scale::Linear || *x > 0.0))
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.is_empty() {
        return match scale {
            Scale::Linear => (0.0, 1.0),
            Scale::Log => (0.1, 10.0),
        };
    }
    match scale {
        Scale::Log => {
            let (l, h) = (lo.log10(), hi.log10());
            let pad = ((h - l) * 0.08).max(0.15);
            // Bars grow from the bottom: leave the smallest one some height.
            let below = if zero { pad.max(0.3) } else { pad };
            (10f64.powf(l - below), 10f64.powf(h + pad))
        }
        Scale::Linear => {
            let (mut l, mut h) = (lo, hi);
            if zero {
                l = l.min(0.0);
                h = h.max(0.0);
            }
            let span = if h > l { h - l } else { h.abs().max(1.0) };
            let pad = span * 0.08;
            let l = if zero && lo >= 0.0 { 0.0 } else { l - pad };
            (l, h + pad)
        }
    }
}

/// A linear axis from `lo` to `hi` (values already placed: log10 of them on a log axis) with
/// grid lines and labels exactly at `ticks`.
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        if self.hi == self.lo {
            return (limit.0 + limit.1) / 2;
        }
        let r = ((v - self.lo) / (self.hi - self.lo)).clamp(-1.0, 2.0);
        limit.0 + (r * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Labels and bold lines at the ticks; no light lines.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

// ---- drawing -----------------------------------------------------------------------------

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

const FONT: &str = "sans-serif";

/// Split `s` into lines of at most `width` characters, at spaces.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in s.split('\n') {
        let mut line = String::new();
        for w in para.split(' ') {
            if !line.is_empty() && line.chars().count() + 1 + w.chars().count() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(w);
        }
        lines.push(line);
    }
    lines
}

#[derive(Clone, Copy, PartialEq)]
enum Swatch {
    Bar,
    Measured,
    Model,
    Line,
}

struct LegendEntry {
    name: String,
    color: RGBColor,
    swatch: Swatch,
}

/// Every series and line of the figure once, by name, in the order they first appear.
fn legend(fig: &Figure) -> Vec<LegendEntry> {
    let mut out: Vec<LegendEntry> = Vec::new();
    for p in &fig.panels {
        let entries = p
            .series
            .iter()
            .map(|s| {
                let swatch = match s.style {
                    Style::Bar => Swatch::Bar,
                    Style::Measured => Swatch::Measured,
                    Style::Model => Swatch::Model,
                };
                (s.name.clone(), s.color, swatch)
            })
            .chain(
                p.lines
                    .iter()
                    .map(|l| (l.name.clone(), l.color, Swatch::Line)),
            );
        for (name, color, swatch) in entries {
            if !out.iter().any(|e| e.name == name) {
                out.push(LegendEntry {
                    name,
                    color,
                    swatch,
                });
            }
        }
    }
    out
}

/// Characters per legend line.
const LEGEND_CHARS: usize = 34;

/// Draw the legend down `area`: a swatch of each entry's kind and its name, wrapped.
fn draw_legend(area: &Area, entries: &[LegendEntry]) -> Res<()> {
    let style = (FONT, 16).into_font().color(&BLACK);
    let mut y = 40;
    for e in entries {
        let (x0, x1, cy) = (8, 40, y + 8);
        match e.swatch {
            Swatch::Bar => {
                area.draw(&Rectangle::new(
                    [(x0 + 4, y), (x1 - 4, y + 16)],
                    e.color.filled(),
                ))?;
            }
            Swatch::Measured => {
                area.draw(&PathElement::new(
                    vec![(x0, cy), (x1, cy)],
                    e.color.stroke_width(1),
                ))?;
                area.draw(&Circle::new(((x0 + x1) / 2, cy), 4, e.color.filled()))?;
                area.draw(&PathElement::new(
                    vec![((x0 + x1) / 2, y - 3), ((x0 + x1) / 2, y + 19)],
                    e.color.stroke_width(1),
                ))?;
            }
            Swatch::Model | Swatch::Line => {
                area.draw(&DashedPathElement::new(
                    vec![(x0, cy), (x1, cy)],
                    7,
                    4,
                    e.color.stroke_width(2),
                ))?;
            }
        }
        for (i, l) in wrap(&e.name, LEGEND_CHARS).iter().enumerate() {
            area.draw(&Text::new(
                l.clone(),
                (x1 + 8, y + 1 + 18 * i as i32),
                style.clone(),
            ))?;
        }
        y += 18 * wrap(&e.name, LEGEND_CHARS).len() as i32 + 10;
    }
    Ok(())
}

/// Draw one panel into `area`.
fn draw_panel(p: &Panel, area: &Area) -> Res<()> {
    let (pw, _) = area.dim_in_pixel();
    // The values the y axis must hold, in its units: every measurement and line, and the
    // models where they stay within twice the measurements' range (a fitted curve may run off
    // towards a pole or below zero outside the sizes measured; it is cut there).
    let mut ys: Vec<f64> = Vec::new();
    for s in p.series.iter().filter(|s| s.style != Style::Model) {
        for (_, st) in &s.points {
            ys.extend([st.med, st.lo, st.hi]);
        }
    }
    let finite = ys.iter().copied().filter(|y| y.is_finite());
    let (m_lo, m_hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
        (a.min(y), b.max(y))
    });
    let model_ok = |y: f64| -> bool {
        if !m_lo.is_finite() {
            return true;
        }
        let span = (m_hi - m_lo).max(m_hi.abs() * 0.1);
        match p.y_scale {
            Scale::Log => y >= m_lo / 2.0 && y <= m_hi * 2.0,
            Scale::Linear => y >= m_lo - span && y <= m_hi + span,
        }
    };
    for s in p.series.iter().filter(|s| s.style == Style::Model) {
        ys.extend(
            s.points
                .iter()
                .map(|(_, st)| st.med)
                .filter(|y| model_ok(*y)),
        );
    }
    ys.extend(p.lines.iter().map(|l| l.y));
    let bars = matches!(p.x, XAxis::Groups(_));
    let (y0, y1) = range(p.y_scale, &ys, p.y_zero || bars);
    let y_ticks = ticks(p.y_scale, y0, y1);
    let (ty0, ty1) = (p.y_scale.t(y0), p.y_scale.t(y1));

    let (x_scale, x_fmt, x_label, groups) = match &p.x {
        XAxis::Groups(g) => (Scale::Linear, Fmt::Num, String::new(), Some(g.clone())),
        XAxis::Numeric { label, scale, fmt } => (*scale, *fmt, label.clone(), None),
    };
    let (tx0, tx1, x_ticks) = match &groups {
        Some(g) => (
            -0.5,
            g.len() as f64 - 0.5,
            (0..g.len()).map(|i| i as f64).collect(),
        ),
        None => {
            let mut xs: Vec<f64> = p
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|(x, _)| *x))
                .filter(|x| x.is_finite() && (x_scale == Scale::Linear || *x > 0.0))
                .collect();
            xs.sort_by(f64::total_cmp);
            xs.dedup();
            if xs.is_empty() {
                // Nothing placeable (no finite x, or none above 0 on a log axis).
                xs = vec![1.0, 10.0];
            }
            let (lo, hi) = match x_scale {
                Scale::Log => {
                    let (l, h) = (xs[0].log10(), xs[xs.len() - 1].log10());
                    let pad = ((h - l) * 0.06).max(0.12);
                    (10f64.powf(l - pad), 10f64.powf(h + pad))
                }
                Scale::Linear => {
                    let (l, h) = (xs[0], xs[xs.len() - 1]);
                    let pad = if h > l {
                        (h - l) * 0.06
                    } else {
                        l.abs().max(1.0) * 0.5
                    };
                    (l - pad, h + pad)
                }
            };
            // Measured sizes make the best ticks, when there are few of them.
            let t = if xs.len() <= 12 && xs.len() >= 2 {
                xs.clone()
            } else {
                ticks(x_scale, lo, hi)
            };
            let t: Vec<f64> = t.into_iter().map(|v| x_scale.t(v)).collect();
            (x_scale.t(lo), x_scale.t(hi), t)
        }
    };

    let x_names = groups.clone().unwrap_or_default();
    let x_formatter = |x: &f64| -> String {
        if groups.is_some() {
            let i = x.round();
            if i >= 0.0 && (i as usize) < x_names.len() && (x - i).abs() < 1e-6 {
                x_names[i as usize].clone()
            } else {
                String::new()
            }
        } else {
            fmt(x_fmt, x_scale.inv(*x))
        }
    };
    let y_formatter = |y: &f64| fmt(p.y_fmt, p.y_scale.inv(*y));
    let longest_y = y_ticks
        .iter()
        .map(|v| fmt(p.y_fmt, *v).chars().count())
        .max()
        .unwrap_or(1);

    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 20).into_font().style(FontStyle::Bold))
        .margin(10)
        .margin_right(24)
        .x_label_area_size(if x_label.is_empty() { 36 } else { 58 })
        .y_label_area_size(34 + 9 * longest_y as u32)
        .build_cartesian_2d(
            Ticked {
                lo: tx0,
                hi: tx1,
                ticks: x_ticks,
            },
            Ticked {
                lo: ty0,
                hi: ty1,
                ticks: y_ticks.iter().map(|v| p.y_scale.t(*v)).collect(),
            },
        )?;
    let mut mesh = chart.configure_mesh();
    mesh.bold_line_style(RGBColor(225, 225, 225).stroke_width(1))
        .axis_style(BLACK.stroke_width(1))
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 17))
        .x_label_formatter(&x_formatter)
        .y_label_formatter(&y_formatter)
        .y_desc(p.y_label.clone());
    if bars {
        mesh.disable_x_mesh();
    } else {
        mesh.x_desc(x_label.clone());
    }
    mesh.draw()?;

    let ty = |v: f64| -> f64 {
        if p.y_scale == Scale::Log && v <= 0.0 {
            ty0
        } else {
            p.y_scale.t(v).clamp(ty0, ty1)
        }
    };
    // Error-bar caps: a fixed share of the panel's width.
    let cap_px = 5.0;
    let plot_px = (pw as f64 - 34.0 - 9.0 * longest_y as f64 - 34.0).max(100.0);
    let cap = cap_px / plot_px * (tx1 - tx0);
    let error_bar = |x: f64, st: &Stat, half: f64, color: RGBColor| {
        let (a, b) = (ty(st.lo), ty(st.hi));
        vec![
            PathElement::new(vec![(x, a), (x, b)], color.stroke_width(1)),
            PathElement::new(vec![(x - half, a), (x + half, a)], color.stroke_width(1)),
            PathElement::new(vec![(x - half, b), (x + half, b)], color.stroke_width(1)),
        ]
    };

    if let Some(g) = &groups {
        let base = if p.y_scale == Scale::Log {
            ty0
        } else {
            ty(0.0)
        };
        let bar_series: Vec<&Series> = p.series.iter().filter(|s| s.style == Style::Bar).collect();
        for gi in 0..g.len() {
            let present: Vec<(&Series, Stat)> = bar_series
                .iter()
                .filter_map(|s| {
                    s.points
                        .iter()
                        .find(|(x, _)| (*x - gi as f64).abs() < 1e-9)
                        .map(|(_, st)| (*s, *st))
                })
                .collect();
            let slot = 0.8 / present.len().max(1) as f64;
            for (j, (s, st)) in present.iter().enumerate() {
                let left = gi as f64 - 0.4 + j as f64 * slot;
                let (l, r) = (left + slot * 0.08, left + slot * 0.92);
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(l, base), (r, ty(st.med))],
                    s.color.filled(),
                )))?;
                if st.hi > st.lo {
                    chart.draw_series(error_bar(
                        (l + r) / 2.0,
                        st,
                        (slot * 0.18).min(cap * 2.0),
                        BLACK,
                    ))?;
                }
            }
        }
    }
    for s in p.series.iter().filter(|s| s.style != Style::Bar) {
        let mut pts: Vec<(f64, Stat)> = s
            .points
            .iter()
            .filter(|(x, st)| {
                st.med.is_finite()
                    && (x_scale == Scale::Linear || *x > 0.0)
                    && (p.y_scale == Scale::Linear || st.med > 0.0)
                    && (s.style != Style::Model || model_ok(st.med))
            })
            .map(|(x, st)| (x_scale.t(*x), *st))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<(f64, f64)> = pts.iter().map(|(x, st)| (*x, ty(st.med))).collect();
        match s.style {
            Style::Model => {
                chart.draw_series(std::iter::once(DashedPathElement::new(
                    path,
                    8,
                    5,
                    s.color.stroke_width(2),
                )))?;
            }
            _ => {
                chart.draw_series(std::iter::once(PathElement::new(
                    path.clone(),
                    s.color.mix(0.6).stroke_width(1),
                )))?;
                for (x, st) in &pts {
                    if st.hi > st.lo {
                        chart.draw_series(error_bar(*x, st, cap, s.color))?;
                    }
                }
                chart.draw_series(
                    path.iter()
                        .map(|&(x, y)| Circle::new((x, y), 4, s.color.filled())),
                )?;
            }
        }
    }
    for l in &p.lines {
        chart.draw_series(std::iter::once(DashedPathElement::new(
            vec![(tx0, ty(l.y)), (tx1, ty(l.y))],
            8,
            5,
            l.color.stroke_width(2),
        )))?;
    }
    Ok(())
}

/// Write `fig` as an SVG file at `path`.
fn render(fig: &Figure, path: &Path) -> Res<()> {
    let rows = fig.panels.len().div_ceil(fig.cols).max(1);
    let cols = fig.cols.min(fig.panels.len()).max(1);
    let entries = legend(fig);
    let legend_w = 60 + 9 * LEGEND_CHARS as u32;
    let (pw, ph) = fig.panel;
    let width = cols as u32 * pw + legend_w;
    let sub = wrap(&fig.subtitle, (width as usize - 40) / 8);
    let header = 54 + 21 * sub.len() as u32;
    let legend_h: u32 = 50
        + entries
            .iter()
            .map(|e| 18 * wrap(&e.name, LEGEND_CHARS).len() as u32 + 10)
            .sum::<u32>();
    let height = header + (rows as u32 * ph).max(legend_h);
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    root.draw(&Text::new(
        fig.title.clone(),
        (16, 12),
        (FONT, 26).into_font().style(FontStyle::Bold).color(&BLACK),
    ))?;
    for (i, l) in sub.iter().enumerate() {
        root.draw(&Text::new(
            l.clone(),
            (16, 48 + 21 * i as i32),
            (FONT, 17).into_font().color(&RGBColor(70, 70, 70)),
        ))?;
    }
    let (_, body) = root.split_vertically(header);
    let (main, side) = body.split_horizontally(cols as u32 * pw);
    // A legend taller than the panels makes the figure taller, not the panels.
    let (main, _) = main.split_vertically(rows as u32 * ph);
    let areas = main.split_evenly((rows, cols));
    for (p, a) in fig.panels.iter().zip(&areas) {
        draw_panel(p, a)?;
    }
    draw_legend(&side, &entries)?;
    root.present()?;
    Ok(())
}

// ---- the parts ---------------------------------------------------------------------------

/// What every subtitle says about the marks.
const MARKS: &str = "bars and points: medians; error bars: fastest .. slowest run";

/// A `meets_target` of the JSON as the tables print it.
fn yes_no(meets: Option<bool>) -> &'static str {
    match meets {
        Some(true) => "MEETS",
        Some(false) => "MISSES",
        None => "n/a",
    }
}

/// The largest value a set of time series reaches, for `time_unit`.
fn max_hi<'a>(stats: impl IntoIterator<Item = &'a Stat>) -> f64 {
    stats.into_iter().map(|s| s.hi).fold(0.0, f64::max)
}

/// `cairn-bench-ckpt`: the fixed cost against its baselines and targets; the bandwidth test.
fn ckpt(v: &Value) -> Res<Vec<Figure>> {
    let mut figs = Vec::new();
    let ctx = format!(
        "{} ranks on {} node(s), {} cores, tier root on {}",
        num(v, "ranks")?,
        num(v, "nodes")?,
        num(v, "cores")?,
        if get(v, "tmpfs").and_then(Value::as_bool) == Some(true) {
            "tmpfs"
        } else {
            "not tmpfs"
        }
    );
    if let Some(f) = get(v, "fixed_cost") {
        let kinds = [
            ("Cairn: Engine::checkpoint", "checkpoint", "cairn", CAIRN),
            (
                "floor: allreduce of 6 x i64",
                "allreduce",
                "baseline_allreduce",
                BASE,
            ),
            (
                "tiny file: open, write 72 B, rename",
                "tiny file",
                "baseline_tiny_file",
                ORANGE,
            ),
        ];
        let stats: Vec<Stat> = kinds.iter().map(|k| stat(f, k.2)).collect::<Res<_>>()?;
        let target = num(f, "target_s")?;
        let scr = num(f, "scr_s")?;
        let (k, unit) = time_unit(target);
        let mut p = Panel::bars(
            "Time per checkpoint of 8 B + 64 B per rank, node-local tier",
            kinds.iter().map(|k| k.1.to_string()).collect(),
            format!("time ({unit}, log scale)"),
        )
        .log_y();
        for (i, ((name, _, _, color), s)) in kinds.iter().zip(&stats).enumerate() {
            p.add(Series::new(*name, *color, Style::Bar).at(i as f64, s.scale(k)));
        }
        p.line(
            format!("target: {} {unit}", fmt_num(target * k)),
            target * k,
            TARGET,
        );
        p.line(
            format!(
                "SCR's fixed cost in the DEEP-ER report: {} {unit} (quoted)",
                fmt_num(scr * k)
            ),
            scr * k,
            REFERENCE,
        );
        figs.push(Figure::new(
            "fixed",
            "Fixed cost of a Cairn checkpoint",
            format!(
                "{ctx}; {} timed checkpoints after {} warm-up, interleaved with the baselines. Median {} {unit} = {:.2}x the target ({}). {MARKS}.",
                num(f, "iterations")?,
                num(f, "warmup")?,
                fmt_num(stats[0].med * k),
                stats[0].med / target,
                yes_no(get(f, "meets_target").and_then(Value::as_bool)),
            ),
        )
        .grid(1, 760, 480).with([p]));
    }
    if let Some(b) = get(v, "bandwidth") {
        let kinds = [
            (
                "plain write() + rename (baseline)",
                "plain write",
                "baseline_plain_write",
                BASE,
            ),
            ("Cairn: Engine::checkpoint", "checkpoint", "cairn", CAIRN),
            (
                "write() in chunk-size pieces + rename",
                "write in pieces",
                "breakdown_write_in_chunks",
                LIGHT,
            ),
            (
                "xxh3 checksums only, no I/O",
                "checksums only",
                "breakdown_checksum_only",
                CAIRN_3,
            ),
        ];
        let stats: Vec<Stat> = kinds.iter().map(|k| stat(b, k.2)).collect::<Res<_>>()?;
        let total = num(b, "bytes_total")? / MIB;
        let (k, unit) = time_unit(max_hi(&stats));
        let groups: Vec<String> = kinds.iter().map(|k| k.1.to_string()).collect();
        let mut t = Panel::bars(
            "Time per run (slowest rank)",
            groups.clone(),
            format!("time ({unit})"),
        );
        // The checksums alone do no I/O: their time explains, their bandwidth would only
        // flatten the others.
        let mut bw = Panel::bars("Bandwidth, all ranks", groups[..3].to_vec(), "MiB/s");
        for (i, ((name, _, _, color), s)) in kinds.iter().zip(&stats).enumerate() {
            t.add(Series::new(*name, *color, Style::Bar).at(i as f64, s.scale(k)));
            if i < 3 {
                bw.add(Series::new(*name, *color, Style::Bar).at(i as f64, s.rate(total)));
            }
        }
        let target = num(b, "target_ratio")?;
        bw.line(
            format!("target: {target} x the plain write's bandwidth"),
            target * total / stats[0].med,
            TARGET,
        );
        figs.push(Figure::new(
            "bandwidth",
            "Checkpoint bandwidth against a plain write of the same bytes",
            format!(
                "{ctx}; {} MiB per rank, {} runs of each after one warm-up, alternating, files deleted between runs. Cairn / plain bandwidth {:.3} (target >= {target}: {}). {MARKS}.",
                num(b, "mib_per_rank")?,
                num(b, "reps")?,
                num(b, "cairn_over_plain_bandwidth")?,
                yes_no(get(b, "meets_target").and_then(Value::as_bool)),
            ),
        )
        .grid(2, 640, 440).with([t, bw]));
    }
    Ok(figs)
}

/// `cairn-bench-redundancy`: cpex against its baselines, bounds and pipeline models; the
/// codes' throughput; the engine's checkpoint and rebuild.
fn redundancy(v: &Value) -> Res<Vec<Figure>> {
    let mut figs = Vec::new();
    let ctx = format!(
        "job of {} ranks, {} cores, tier root on {}",
        num(v, "ranks")?,
        num(v, "cores")?,
        if get(v, "tmpfs").and_then(Value::as_bool) == Some(true) {
            "tmpfs"
        } else {
            "not tmpfs"
        }
    );
    let cpex = get(v, "cpex")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !cpex.is_empty() {
        let mut by_ranks: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
        for row in &cpex {
            by_ranks
                .entry(num(row, "ranks")? as u64)
                .or_default()
                .push(row);
        }
        // Per ranks and kind: (MiB per rank, times).
        let kind = |rows: &[&Value], key: &str| -> Res<Vec<(f64, Stat)>> {
            rows.iter()
                .map(|r| Ok((num(r, "mib_per_rank")?, stat(field(r, "times")?, key)?)))
                .collect()
        };
        let measured = [
            ("partner, streamed (Cairn)", "stream", CAIRN),
            ("partner, read back (Cairn)", "readback", ORANGE),
            ("checkpoint, scheme single (Cairn)", "single", CAIRN_3),
            ("local write: part + buddy file", "two_files", BASE),
            ("exchange: MPI sendrecv, 1 MiB pieces", "exchange", BROWN),
        ];
        let models = [
            ("partner, streamed (Cairn)", "stream", CAIRN),
            (
                "model: copy+exchange, 2 writer threads",
                "model_threads",
                PURPLE,
            ),
            (
                "model: 1 thread: write, exchange, write (cpex 19b)",
                "model_inline",
                PINK,
            ),
            (
                "model: own-file thread + exchange/write (cpex 19c)",
                "model_one_writer",
                OLIVE,
            ),
        ];
        let all_max = by_ranks
            .values()
            .flat_map(|rows| rows.iter())
            .flat_map(|r| {
                measured
                    .iter()
                    .filter_map(|k| series(r.get("times")?.get(k.1)?).map(|s| s.hi))
                    .collect::<Vec<_>>()
            })
            .fold(0.0, f64::max);
        let (k, unit) = time_unit(all_max);
        let target = by_ranks
            .values()
            .next()
            .and_then(|rows| rows[0].get("target_stream"))
            .and_then(Value::as_f64)
            .unwrap_or(1.2);
        let x_scale = |rows: &[&Value]| {
            let sizes: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.get("mib_per_rank")?.as_f64())
                .collect();
            let (lo, hi) = sizes
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
            if hi >= 4.0 * lo {
                Scale::Log
            } else {
                Scale::Linear
            }
        };
        let mut fig = Figure::new(
            "cpex",
            "cpex (DEEP-ER 3.2.2): partner copy streamed vs read back, 2 simulated nodes",
            format!(
                "{ctx}; every size a checkpoint of one region per rank, {} runs of each kind after a warm-up, alternating. Target: streamed <= {target} x max(local write, exchange). {MARKS}.",
                num(&cpex[0], "reps")?
            ),
        )
        .grid(by_ranks.len(), 640, 420);
        let mut bw_panels = Vec::new();
        for (ranks, rows) in &by_ranks {
            let xs = x_scale(rows);
            let mut t = Panel::xy(
                format!("{ranks} ranks: time per checkpoint"),
                "MiB per rank",
                xs,
                Fmt::Num,
                format!("time ({unit})"),
            );
            let mut bw = Panel::xy(
                format!("{ranks} ranks: bandwidth per rank"),
                "MiB per rank",
                xs,
                Fmt::Num,
                "MiB/s per rank (part size / time)",
            );
            for (name, key, color) in measured {
                let pts = kind(rows, key)?;
                t.add(
                    Series::new(name, color, Style::Measured)
                        .with(pts.iter().map(|(x, s)| (*x, s.scale(k)))),
                );
                bw.add(
                    Series::new(name, color, Style::Measured)
                        .with(pts.iter().map(|(x, s)| (*x, s.rate(*x)))),
                );
            }
            let (local, exchange) = (kind(rows, "two_files")?, kind(rows, "exchange")?);
            let bound = local
                .iter()
                .zip(&exchange)
                .map(|((x, l), (_, e))| (*x, Stat::point(target * l.med.max(e.med) * k)));
            t.add(
                Series::new(
                    format!("target: {target} x max(local write, exchange)"),
                    TARGET,
                    Style::Model,
                )
                .with(bound),
            );
            let floor = local
                .iter()
                .zip(&exchange)
                .map(|((x, l), (_, e))| (*x, Stat::point((l.med + e.med) * k)));
            t.add(
                Series::new(
                    "no overlap: local write + exchange",
                    REFERENCE,
                    Style::Model,
                )
                .with(floor),
            );
            fig.push(t);
            bw_panels.push(bw);
        }
        for p in bw_panels {
            fig.push(p);
        }
        figs.push(fig);

        let mut fig = Figure::new(
            "cpex-models",
            "cpex: Cairn's streamed partner copy against models of the pipeline",
            format!(
                "{ctx}; the models are the same work written with raw MPI into recycled buffers, without encoding: what a different arrangement in protect.rs would give on this machine. {MARKS}."
            ),
        )
        .grid(by_ranks.len(), 640, 420);
        for (ranks, rows) in &by_ranks {
            let mut t = Panel::xy(
                format!("{ranks} ranks: time per checkpoint"),
                "MiB per rank",
                x_scale(rows),
                Fmt::Num,
                format!("time ({unit})"),
            );
            for (name, key, color) in models {
                let pts = kind(rows, key)?;
                t.add(
                    Series::new(name, color, Style::Measured)
                        .with(pts.iter().map(|(x, s)| (*x, s.scale(k)))),
                );
            }
            let (local, exchange) = (kind(rows, "two_files")?, kind(rows, "exchange")?);
            let floor = local
                .iter()
                .zip(&exchange)
                .map(|((x, l), (_, e))| (*x, Stat::point((l.med + e.med) * k)));
            t.add(
                Series::new(
                    "no overlap: local write + exchange",
                    REFERENCE,
                    Style::Model,
                )
                .with(floor),
            );
            fig.push(t);
        }
        figs.push(fig);
    }

    let codec = get(v, "codec")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !codec.is_empty() {
        let groups: Vec<String> = codec.iter().map(|c| text(c, "code")).collect::<Res<_>>()?;
        let mut p = Panel::bars(
            "Throughput of one stripe in memory",
            groups,
            "GB/s of data shards (10^9 B/s)",
        );
        for (name, key, color) in [
            ("memcpy of the data shards (baseline)", "memcpy", BASE),
            ("encode (stripe::encode)", "encode", CAIRN),
            (
                "encode, 64 KiB of every shard at a time",
                "encode_sliced_64k",
                CAIRN_2,
            ),
            ("recover the first m data shards", "recover", ORANGE),
        ] {
            let mut s = Series::new(name, color, Style::Bar);
            for (i, c) in codec.iter().enumerate() {
                let bytes = num(c, "k")? * num(c, "shard_bytes")?;
                s = s.at(i as f64, stat(c, key)?.rate(bytes / 1e9));
            }
            p.add(s);
        }
        figs.push(
            Figure::new(
                "codec",
                "xor and Reed-Solomon codes: encode and recover against memcpy",
                format!(
                    "{ctx}; one process, one stripe of k in-memory data shards per code. {MARKS}."
                ),
            )
            .grid(1, 820, 440)
            .with([p]),
        );
    }

    let engine = get(v, "engine")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !engine.is_empty() {
        let groups: Vec<String> = engine
            .iter()
            .map(|e| Ok(format!("{} ({})", text(e, "scheme")?, num(e, "ranks")?)))
            .collect::<Res<_>>()?;
        let kinds = [
            ("checkpoint", "checkpoint", CAIRN),
            ("restart, all storage present", "plain_restart", CAIRN_3),
            (
                "restart after losing node 1's storage (rebuild)",
                "restart_after_loss",
                ORANGE,
            ),
        ];
        let mut all = Vec::new();
        for e in &engine {
            for kd in &kinds {
                if let Some(s) = get(e, kd.1).and_then(series) {
                    all.push(s);
                }
            }
        }
        let (k, unit) = time_unit(max_hi(&all));
        let mut p = Panel::bars(
            "Checkpoint and restart per scheme (ranks in brackets)",
            groups,
            format!("time ({unit})"),
        );
        for (name, key, color) in kinds {
            let mut s = Series::new(name, color, Style::Bar);
            for (i, e) in engine.iter().enumerate() {
                if let Some(st) = get(e, key).and_then(series) {
                    s = s.at(i as f64, st.scale(k));
                }
            }
            p.add(s);
        }
        let mib = num(&engine[0], "mib_per_rank")?;
        figs.push(Figure::new(
            "engine",
            "Redundancy schemes in the engine: checkpoint, restart and rebuild",
            format!(
                "{ctx}; {mib} MiB per rank; 8 ranks on 4 simulated nodes, 10 on 10; restart = restart_test + restart, bytes checked. {MARKS}."
            ),
        )
        .grid(1, 980, 460).with([p]));
    }
    Ok(figs)
}

/// `cairn-bench-redundancy nbody`: runtime and checkpoint time per kind and configuration.
fn nbody(v: &Value) -> Res<Vec<Figure>> {
    let rows = arr(v, "nbody")?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let groups: Vec<String> = rows
        .iter()
        .map(|r| {
            Ok(format!(
                "{} ranks, {} nodes",
                num(r, "ranks")?,
                num(r, "nodes")?
            ))
        })
        .collect::<Res<_>>()?;
    let kinds = [
        ("no checkpoint", "no_checkpoint", BASE),
        ("scheme single", "single", CAIRN_3),
        ("partner, streamed", "partner_stream", CAIRN),
        ("partner, read back", "partner_readback", ORANGE),
    ];
    let mut figs = Vec::new();
    let mut fig = Figure::new(
        "runtime",
        "N-body mock-up (DEEP-ER 4.2.1, Table 1): partner copies streamed vs read back",
        format!(
            "examples/nbody.c, {} steps, a checkpoint every {}, {} bytes per rank per checkpoint, {} runs of each kind; runtime = steps x step time + checkpoint time (slowest rank). {MARKS}.",
            num(&rows[0], "steps")?,
            num(&rows[0], "every")?,
            num(&rows[0], "checkpoint_bytes_per_rank")?,
            num(&rows[0], "reps")?
        ),
    )
    .grid(2, 640, 440);
    for (what, key) in [
        ("Runtime", "runtime"),
        ("Checkpoint time per run", "checkpoint"),
    ] {
        let mut stats = Vec::new();
        for r in rows {
            for kd in &kinds {
                stats.push(stat(field(field(r, "runs")?, kd.1)?, key)?);
            }
        }
        let (k, unit) = time_unit(max_hi(&stats));
        let mut p = Panel::bars(what, groups.clone(), format!("time ({unit})"));
        for (j, (name, _, color)) in kinds.iter().enumerate() {
            let pts = (0..rows.len()).map(|i| (i as f64, stats[i * kinds.len() + j].scale(k)));
            p.add(Series::new(*name, *color, Style::Bar).with(pts));
        }
        fig.push(p);
    }
    figs.push(fig);
    Ok(figs)
}

/// `cairn-bench-flush`: the application's wall time per variant; the scrio-style fit.
fn flush(v: &Value) -> Res<Vec<Figure>> {
    let mut figs = Vec::new();
    let ctx = format!(
        "{} ranks on {} node(s), {} cores online; global tier on {}",
        num(v, "ranks")?,
        num(v, "nodes")?,
        num(v, "cores_online")?,
        if get(v, "global_tmpfs").and_then(Value::as_bool) == Some(true) {
            "tmpfs"
        } else {
            "a disk (not tmpfs)"
        }
    );
    if let Some(a) = get(v, "app") {
        let vars = field(a, "variants")?;
        let kinds = [
            (
                "no-ckpt: no checkpoints (compute baseline)",
                "no-ckpt",
                BASE,
            ),
            ("none: node-local only, no flush", "none", CAIRN_3),
            ("async: flush every one, background", "async", CAIRN),
            ("sync: flush every one, before return", "sync", ORANGE),
        ];
        let walls: Vec<Stat> = kinds
            .iter()
            .map(|kd| stat(field(vars, kd.1)?, "wall"))
            .collect::<Res<_>>()?;
        let (k, unit) = time_unit(max_hi(&walls));
        let mut wall = Panel::bars(
            "Application wall time",
            kinds.iter().map(|kd| kd.1.to_string()).collect(),
            format!("time ({unit})"),
        );
        for (i, ((name, _, color), s)) in kinds.iter().zip(&walls).enumerate() {
            wall.add(Series::new(*name, *color, Style::Bar).at(i as f64, s.scale(k)));
        }
        let target = num(a, "target")?;
        wall.line(
            format!("target: async <= {target} x none"),
            target * walls[1].med * k,
            TARGET,
        );
        let per: Vec<(&str, &str, RGBColor)> = vec![
            (
                "inside checkpoint(), per checkpoint",
                "checkpoint_per_checkpoint",
                CAIRN_2,
            ),
            (
                "flush to the global tier (copy + fsync), per checkpoint",
                "flush_per_checkpoint",
                PURPLE,
            ),
        ];
        let between = num(a, "compute_between_checkpoints_s")?;
        let mut stats = vec![between];
        for kd in &kinds[1..] {
            for p in &per {
                if let Some(s) = get(field(vars, kd.1)?, p.1).and_then(series) {
                    stats.push(s.hi);
                }
            }
        }
        let (k2, unit2) = time_unit(stats.iter().copied().fold(0.0, f64::max));
        let mut ck = Panel::bars(
            "Per checkpoint",
            kinds[1..].iter().map(|kd| kd.1.to_string()).collect(),
            format!("time ({unit2})"),
        );
        for (name, key, color) in per {
            let mut s = Series::new(name, color, Style::Bar);
            for (i, kd) in kinds[1..].iter().enumerate() {
                if let Some(st) = get(field(vars, kd.1)?, key).and_then(series) {
                    s = s.at(i as f64, st.scale(k2));
                }
            }
            ck.add(s);
        }
        ck.line(
            "compute between two checkpoints (no-ckpt)",
            between * k2,
            REFERENCE,
        );
        let applies = get(a, "target_applies").and_then(Value::as_bool) == Some(true);
        let verdict = if applies {
            format!(
                "target <= {target}: {}",
                yes_no(get(a, "meets_target").and_then(Value::as_bool))
            )
        } else {
            format!(
                "the global tier is the bottleneck (a flush takes {:.2}x the compute between checkpoints): the target does not apply",
                num(a, "flush_over_compute")?
            )
        };
        figs.push(Figure::new(
            "app",
            "Application overhead of flushing checkpoints to the global tier (DEEP-ER style)",
            format!(
                "{ctx}; 2D Jacobi stencil, {} MiB of f64 per rank, {} steps, a checkpoint every {} ({} per run), {} runs of each variant, order rotating. async / none = {:.3} ({verdict}); sync / none = {:.3}. {MARKS}.",
                num(a, "mib_per_rank")?,
                num(a, "steps")?,
                num(a, "every")?,
                num(a, "checkpoints")?,
                num(a, "reps")?,
                num(a, "async_over_none")?,
                num(a, "sync_over_none")?,
            ),
        )
        .grid(2, 620, 440).with([wall, ck]));
    }
    if let Some(f) = get(v, "fit") {
        let kinds = [
            (
                "durable: checkpoint + flush (global tier, fsync)",
                "durable",
                ORANGE,
            ),
            ("local: checkpoint alone (node-local tier)", "local", CAIRN),
        ];
        let mut calls = Vec::new();
        for (_, key, _) in &kinds {
            let kd = field(f, key)?;
            let pts: Vec<(f64, Stat)> = arr(kd, "calls")?
                .iter()
                .map(|c| Ok((num(c, "mib")?, stat(c, "time")?)))
                .collect::<Res<_>>()?;
            calls.push((num(kd, "t_overhead_s")?, num(kd, "s_per_mib")?, pts));
        }
        let all: Vec<Stat> = calls.iter().flat_map(|c| c.2.iter().map(|p| p.1)).collect();
        let (k, unit) = time_unit(max_hi(&all));
        let xs: Vec<f64> = all_x(
            &calls
                .iter()
                .flat_map(|c| c.2.iter().map(|p| p.0))
                .collect::<Vec<_>>(),
        );
        let (xmin, xmax) = (xs[0], xs[xs.len() - 1]);
        let x_scale = if xmax >= 4.0 * xmin {
            Scale::Log
        } else {
            Scale::Linear
        };
        let mut t = Panel::xy(
            "Time per call",
            "n: MiB per rank",
            x_scale,
            Fmt::Num,
            format!("time ({unit}, log scale)"),
        )
        .log_y();
        let mut bw = Panel::xy(
            "Bandwidth per rank",
            "n: MiB per rank",
            x_scale,
            Fmt::Num,
            "MiB/s per rank (n / t, log scale)",
        )
        .log_y();
        let mut sub = Vec::new();
        for ((name, key, color), (t0, per_mib, pts)) in kinds.iter().zip(&calls) {
            t.add(
                Series::new(*name, *color, Style::Measured)
                    .with(pts.iter().map(|(x, s)| (*x, s.scale(k)))),
            );
            bw.add(
                Series::new(*name, *color, Style::Measured)
                    .with(pts.iter().map(|(x, s)| (*x, s.rate(*x)))),
            );
            let model = |n: f64| t0 + n * per_mib;
            let curve: Vec<f64> = (0..=48)
                .map(|i| match x_scale {
                    Scale::Log => xmin * (xmax / xmin).powf(i as f64 / 48.0),
                    Scale::Linear => xmin + (xmax - xmin) * i as f64 / 48.0,
                })
                .collect();
            let label = format!(
                "{key} fit: t(n) = {} ms + n / {} MiB/s",
                fmt_num(t0 * 1e3),
                fmt_num(1.0 / per_mib)
            );
            t.add(
                Series::new(label.clone(), *color, Style::Model).with(
                    curve
                        .iter()
                        .map(|n| (*n, Stat::point(model(*n) * k)))
                        .filter(|(_, s)| s.med > 0.0),
                ),
            );
            bw.add(
                Series::new(label, *color, Style::Model).with(
                    curve
                        .iter()
                        .map(|n| (*n, Stat::point(n / model(*n))))
                        .filter(|(_, s)| s.med > 0.0),
                ),
            );
            let kd = field(f, key)?;
            sub.push(format!(
                "{key}: t_overhead = {} ms, B_max = {} MiB/s per rank, R^2 = {:.4}, n_1/2 = {} MiB",
                fmt_num(t0 * 1e3),
                fmt_num(1.0 / per_mib),
                num(kd, "r2")?,
                fmt_num(num(kd, "n_half_mib")?)
            ));
        }
        figs.push(Figure::new(
            "fit",
            "Fixed and per-byte cost of a checkpoint (scrio style): t(n) = t_overhead + n / B_max",
            format!(
                "{ctx}; {} timed calls per size and kind after a warm-up, alternating; the fit is weighted least squares of the relative residuals over the medians. {}. {MARKS}; dashed: the fitted model.",
                num(f, "reps")?,
                sub.join("; ")
            ),
        )
        .grid(2, 620, 460).with([t, bw]));
    }
    Ok(figs)
}

/// The distinct finite x values, sorted; at least one.
fn all_x(xs: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    if v.is_empty() {
        v.push(1.0);
    }
    v
}

/// `cairn-bench-reduce`: codec speed and ratio against memcpy and Blosc2, block hash
/// throughput, the effect of the block size.
fn reduce(v: &Value) -> Res<Vec<Figure>> {
    let mut figs = Vec::new();
    let ctx = format!(
        "one core of {} ({} online), datasets of ~{} MiB, {} repetitions",
        text(v, "cpu")?,
        num(v, "cores_online")?,
        num(v, "mib")?,
        num(v, "reps")?
    );
    if let Some(c) = get(v, "codec") {
        let results = arr(c, "results")?;
        let names: Vec<String> = arr(c, "configs")?
            .iter()
            .map(|x| text(x, "name"))
            .collect::<Res<_>>()?;
        let groups: Vec<String> = results
            .iter()
            .map(|r| text(r, "dataset"))
            .collect::<Res<_>>()?;
        let colors = |i: usize| {
            [
                RGBColor(31, 119, 180),
                RGBColor(23, 190, 207),
                RGBColor(158, 202, 225),
                RGBColor(44, 160, 44),
                RGBColor(152, 223, 138),
                RGBColor(148, 103, 189),
                RGBColor(197, 176, 213),
                RGBColor(140, 86, 75),
            ][i % 8]
        };
        let target = get(v, "targets")
            .and_then(|t| t.get("compress_mb_s"))
            .and_then(Value::as_f64);
        let mut panels = Vec::new();
        for (title, key) in [
            ("Compression speed", "compress"),
            ("Decompression speed", "decompress"),
            ("Ratio: raw / (stored + 29 B per block)", "ratio"),
        ] {
            // Log scales: memcpy runs at several times the codecs' speed, and mg compresses
            // a hundred times better than the rest.
            let y = if key == "ratio" {
                "ratio (log scale)"
            } else {
                "MB/s of raw data (10^6 B/s, log scale)"
            };
            let mut p = Panel::bars(title, groups.clone(), y).log_y();
            if key != "ratio" {
                let mut s = Series::new("memcpy (baseline)", BASE, Style::Bar);
                for (i, r) in results.iter().enumerate() {
                    s = s.at(
                        i as f64,
                        stat(r, "memcpy")?.rate(num(r, "raw_bytes")? / 1e6),
                    );
                }
                p.add(s);
            }
            for (j, name) in names.iter().enumerate() {
                let mut s = Series::new(format!("Cairn {name}"), colors(j), Style::Bar);
                for (i, r) in results.iter().enumerate() {
                    let raw = num(r, "raw_bytes")?;
                    let cfg = arr(r, "configs")?
                        .iter()
                        .find(|x| x.get("config").and_then(Value::as_str) == Some(name));
                    if let Some(cfg) = cfg {
                        let st = if key == "ratio" {
                            Stat::point(num(cfg, "ratio")?)
                        } else {
                            stat(cfg, key)?.rate(raw / 1e6)
                        };
                        s = s.at(i as f64, st);
                    }
                }
                p.add(s);
            }
            let mut s = Series::new("Blosc2 LZ4 + SHUFFLE, level 5", ORANGE, Style::Bar);
            for (i, r) in results.iter().enumerate() {
                if let Some(b) = get(r, "blosc2") {
                    let st = if key == "ratio" {
                        Stat::point(num(b, "ratio")?)
                    } else {
                        let raw = num(r, "raw_bytes")?;
                        stat(b, key)?.rate(raw / 1e6)
                    };
                    s = s.at(i as f64, st);
                }
            }
            p.add(s);
            if let (Some(t), "compress") = (target, key) {
                p.line(format!("target: {} MB/s per core", fmt_num(t)), t, TARGET);
            }
            panels.push(p);
        }
        let blosc2 = match get(c, "blosc2").and_then(|b| b.get("skipped")) {
            Some(why) => format!(" Blosc2 baseline skipped: {}.", why.as_str().unwrap_or("?")),
            None => String::new(),
        };
        figs.push(Figure::new(
            "codec",
            "Block codecs: Cairn's reduction against memcpy and Blosc2",
            format!(
                "{ctx}; blocks of {}.{blosc2} Target: compress >= 1 GB/s per core with a ratio >= Blosc2's. {MARKS}.",
                fmt_bytes(num(v, "block")?)
            ),
        )
        .grid(1, 1240, 380).with(panels));
    }
    if let Some(h) = get(v, "hash") {
        let mut p = Panel::xy(
            "block_hash (xxh3-128) of every block",
            "block size",
            Scale::Log,
            Fmt::Bytes,
            "GB/s (10^9 B/s)",
        );
        for (i, r) in arr(h, "results")?.iter().enumerate() {
            let raw = num(r, "raw_bytes")?;
            let pts: Vec<(f64, Stat)> = arr(r, "hash")?
                .iter()
                .map(|x| {
                    Ok((
                        num(x, "block")?,
                        series(x)
                            .ok_or_else(|| missing("samples_s"))?
                            .rate(raw / 1e9),
                    ))
                })
                .collect::<Res<_>>()?;
            p.add(Series::new(text(r, "dataset")?, palette(i), Style::Measured).with(pts));
        }
        let memcpy: Vec<f64> = arr(h, "results")?
            .iter()
            .filter_map(|r| {
                Some(r.get("raw_bytes")?.as_f64()? / series(r.get("memcpy")?)?.med / 1e9)
            })
            .collect();
        if let Some(m) = Stat::of(&memcpy) {
            p.line("memcpy, median over the datasets", m.med, REFERENCE);
        }
        if let Some(t) = get(v, "targets")
            .and_then(|t| t.get("hash_gb_s"))
            .and_then(Value::as_f64)
        {
            p.line(format!("target: {} GB/s per core", fmt_num(t)), t, TARGET);
        }
        figs.push(
            Figure::new(
                "hash",
                "Block hash throughput per block size",
                format!("{ctx}. {MARKS}."),
            )
            .grid(1, 860, 460)
            .with([p]),
        );
    }
    if let Some(b) = get(v, "blocks") {
        let mut panels: Vec<Panel> = [
            ("Ratio: raw / (stored + 29 B per block)", "ratio"),
            ("Compression speed", "compress"),
            ("Decompression speed", "decompress"),
        ]
        .iter()
        .map(|(t, key)| {
            let y = if *key == "ratio" {
                "ratio"
            } else {
                "MB/s of raw data"
            };
            let p = Panel::xy(*t, "block size", Scale::Log, Fmt::Bytes, y);
            if *key == "ratio" {
                p.free_y()
            } else {
                p
            }
        })
        .collect();
        let mut i = 0;
        for r in arr(b, "results")? {
            let raw = num(r, "raw_bytes")?;
            let ds = text(r, "dataset")?;
            for c in arr(r, "configs")? {
                let name = format!("{ds}, {}", text(c, "config")?);
                let sizes = arr(c, "sizes")?;
                for (p, key) in panels.iter_mut().zip(["ratio", "compress", "decompress"]) {
                    let pts: Vec<(f64, Stat)> = sizes
                        .iter()
                        .map(|s| {
                            let st = if key == "ratio" {
                                Stat::point(num(s, "ratio")?)
                            } else {
                                stat(s, key)?.rate(raw / 1e6)
                            };
                            Ok((num(s, "block")?, st))
                        })
                        .collect::<Res<_>>()?;
                    p.add(Series::new(name.clone(), palette(i), Style::Measured).with(pts));
                }
                i += 1;
            }
        }
        figs.push(Figure::new(
            "blocks",
            "The block size: ratio and speed of LZ4 with the shuffle",
            format!("{ctx}; lz4+shuffle stores one LZ4 block per shuffled block, lz4+split one per byte plane. {MARKS}."),
        )
        .grid(3, 520, 420).with(panels));
    }
    Ok(figs)
}

/// `cairn-bench-incremental`: time and bytes of incremental against full checkpoints.
fn incremental(v: &Value) -> Res<Vec<Figure>> {
    let rows = arr(v, "rows")?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let groups: Vec<String> = rows
        .iter()
        .map(|r| Ok(format!("{}% changed", fmt_num(num(r, "changed")? * 100.0))))
        .collect::<Res<_>>()?;
    // Older files have the medians only.
    let time = |r: &Value, series_key: &str, median_key: &str| -> Res<Stat> {
        match get(r, series_key).and_then(series) {
            Some(s) => Ok(s),
            None => Ok(Stat::point(num(r, median_key)?)),
        }
    };
    let bytes = |r: &Value, samples_key: &str, median_key: &str| -> Res<Stat> {
        let samples: Vec<f64> = get(r, samples_key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        match Stat::of(&samples) {
            Some(s) => Ok(s),
            None => Ok(Stat::point(num(r, median_key)?)),
        }
    };
    let mut times = Vec::new();
    let mut sizes = Vec::new();
    for r in rows {
        times.push([
            time(r, "full", "full_s")?,
            time(r, "incremental", "incremental_s")?,
        ]);
        sizes.push([
            bytes(r, "full_bytes_samples", "full_bytes")?,
            bytes(r, "incremental_bytes_samples", "incremental_bytes")?,
        ]);
    }
    let (k, unit) = time_unit(max_hi(times.iter().flatten()));
    let mut t = Panel::bars(
        "Time of Engine::checkpoint",
        groups.clone(),
        format!("time ({unit})"),
    );
    let mut b = Panel::bars("Bytes stored (the rank file)", groups, "MiB (log scale)").log_y();
    for (j, (name, color)) in [("full checkpoint", BASE), ("incremental checkpoint", CAIRN)]
        .iter()
        .enumerate()
    {
        t.add(
            Series::new(*name, *color, Style::Bar).with(
                times
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i as f64, s[j].scale(k))),
            ),
        );
        b.add(
            Series::new(*name, *color, Style::Bar).with(
                sizes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i as f64, s[j].scale(1.0 / MIB))),
            ),
        );
    }
    let target = get(v, "target_bytes_ratio_at_1pct")
        .and_then(Value::as_f64)
        .unwrap_or(0.02);
    b.line(
        format!(
            "target at 1% changed: {}% of a full checkpoint",
            fmt_num(target * 100.0)
        ),
        target * sizes[0][0].med / MIB,
        TARGET,
    );
    let mut fig = Figure::new(
        "time-bytes",
        "Incremental checkpoints against full ones",
        format!(
            "one process, {} MiB float64 field, blocks of {}, codec {}, {} repetitions per share of changed blocks; incremental / full bytes at {}: {:.4}. {MARKS}.",
            num(v, "mib")?,
            fmt_bytes(num(v, "block")?),
            text(v, "compress")?,
            num(v, "reps")?,
            groups_first(rows)?,
            sizes[0][1].med / sizes[0][0].med,
        ),
    )
    .grid(2, 600, 440);
    fig.push(t);
    fig.push(b);
    Ok(vec![fig])
}

/// The first row's share of changed blocks, as its group is labelled.
fn groups_first(rows: &[Value]) -> Res<String> {
    Ok(format!(
        "{}% changed",
        fmt_num(num(&rows[0], "changed")? * 100.0)
    ))
}

/// `cairn-bench-fs`: the store against memcpy and /dev/shm per size, chunk sizes, spill-over
/// against CRUISE's model, the interposer.
fn fs(v: &Value) -> Res<Vec<Figure>> {
    let mut figs = Vec::new();
    let settings = field(v, "settings")?;
    let ctx = format!(
        "{} cores; writes of {}, {} repetitions after one warm-up run of each kind, interleaved",
        num(settings, "cores")?,
        fmt_bytes(num(settings, "io")?),
        num(settings, "reps")?
    );
    let kinds = [
        ("memcpy into pre-faulted memory", "memcpy", BASE),
        ("memcpy in write-size pieces", "memcpy_pieces", LIGHT),
        ("Cairn store: create + pwrite", "store", CAIRN),
        ("write() to a new file in /dev/shm", "dev_shm", ORANGE),
    ];
    for (key, title, writers) in [
        (
            "single",
            "One writer: the in-memory store against memcpy and /dev/shm",
            1.0,
        ),
        (
            "two",
            "Two writer processes, one shared store (aggregate)",
            2.0,
        ),
    ] {
        let Some(part) = get(v, key) else { continue };
        let rows = match get(part, "rows").and_then(Value::as_array) {
            Some(r) if !r.is_empty() => r,
            _ => continue,
        };
        let groups: Vec<String> = rows
            .iter()
            .map(|r| Ok(format!("{} MiB", num(r, "size_mib")?)))
            .collect::<Res<_>>()?;
        let mut stats = Vec::new();
        for r in rows {
            for kd in &kinds {
                stats.push(stat(r, kd.1)?);
            }
        }
        let (k, unit) = time_unit(max_hi(&stats));
        let size_note = if writers > 1.0 { " per writer" } else { "" };
        let mut bw = Panel::bars(
            format!("Bandwidth (file size{size_note})"),
            groups.clone(),
            "MB/s (10^6 B/s)",
        );
        let mut t = Panel::bars(
            format!("Time per file{size_note}"),
            groups,
            format!("time ({unit})"),
        );
        for (j, (name, _, color)) in kinds.iter().enumerate() {
            let mut a = Series::new(*name, *color, Style::Bar);
            let mut b = Series::new(*name, *color, Style::Bar);
            for (i, r) in rows.iter().enumerate() {
                let bytes = writers * num(r, "size_mib")? * MIB;
                let s = stats[i * kinds.len() + j];
                a = a.at(i as f64, s.rate(bytes / 1e6));
                b = b.at(i as f64, s.scale(k));
            }
            bw.add(a);
            t.add(b);
        }
        let meets = |name: &str| {
            get(part, "targets")
                .and_then(|t| t.get(name))
                .and_then(|t| t.get("meets"))
                .and_then(Value::as_bool)
        };
        figs.push(Figure::new(
            key,
            title,
            format!(
                "{ctx}. Targets: store >= 0.9 x memcpy ({}), store >= 3 x write() to /dev/shm ({}). {MARKS}.",
                yes_no(meets("store_vs_memcpy")),
                yes_no(meets("store_vs_dev_shm"))
            ),
        )
        .grid(2, 620, 440).with([bw, t]));
    }
    if let Some(c) = get(v, "chunks").filter(|c| c.get("rows").is_some()) {
        let rows = arr(c, "rows")?;
        let bytes = num(c, "file_mib")? * MIB;
        let groups: Vec<String> = rows
            .iter()
            .map(|r| Ok(fmt_bytes(num(r, "chunk")?)))
            .collect::<Res<_>>()?;
        let mut p = Panel::bars(
            format!("A {} MiB file per chunk size", num(c, "file_mib")?),
            groups,
            "MB/s (10^6 B/s)",
        );
        for (name, key, color) in [
            ("memcpy (baseline)", "memcpy", BASE),
            ("store write", "write", CAIRN),
            ("store read, buffer 16 B past a page", "read", CAIRN_3),
            ("store read, page-aligned buffer", "read_aligned", CAIRN_2),
        ] {
            let mut s = Series::new(name, color, Style::Bar);
            for (i, r) in rows.iter().enumerate() {
                s = s.at(i as f64, stat(r, key)?.rate(bytes / 1e6));
            }
            p.add(s);
        }
        figs.push(
            Figure::new(
                "chunks",
                "Chunk sizes of the store (CRUISE's figure 6)",
                format!("{ctx}. {MARKS}."),
            )
            .grid(1, 860, 440)
            .with([p]),
        );
    }
    if let Some(s) = get(v, "spill").filter(|s| s.get("no_sync").is_some()) {
        let bytes = num(s, "file_mib")? * MIB;
        let parts = [("no_sync", "without sync"), ("sync", "with fdatasync")];
        let mut p = Panel::bars(
            format!(
                "A {} MiB file, a {} MiB pool",
                num(s, "file_mib")?,
                num(s, "pool_mib")?
            ),
            parts.iter().map(|x| x.1.to_string()).collect(),
            "MB/s (10^6 B/s)",
        );
        for (name, key, color) in [
            ("all in the pool (T_mem)", "all_pool", CAIRN_3),
            ("all in the spill file (T_spill)", "spill_only", ORANGE),
            ("half spilled (measured)", "mixed", CAIRN),
        ] {
            let mut ser = Series::new(name, color, Style::Bar);
            for (i, (part, _)) in parts.iter().enumerate() {
                ser = ser.at(i as f64, stat(field(s, part)?, key)?.rate(bytes / 1e6));
            }
            p.add(ser);
        }
        let mut model = Series::new("half spilled, CRUISE's model", BASE, Style::Bar);
        for (i, (part, _)) in parts.iter().enumerate() {
            model = model.at(i as f64, Stat::point(num(field(s, part)?, "model_mb_s")?));
        }
        p.add(model);
        let fs_type = get(s, "spill_fs")
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        figs.push(Figure::new(
            "spill",
            "Spill-over against CRUISE's model: T = S / (S_mem/T_mem + S_spill/T_spill)",
            format!(
                "{ctx}; spill file on {fs_type}; measured / model: {:.2}x without sync, {:.2}x with. {MARKS}.",
                num(field(s, "no_sync")?, "measured_vs_model")?,
                num(field(s, "sync")?, "measured_vs_model")?
            ),
        )
        .grid(1, 720, 440).with([p]));
    }
    if let Some(pre) = get(v, "preload").filter(|p| p.get("rows").is_some()) {
        let rows = arr(pre, "rows")?;
        let groups: Vec<String> = rows
            .iter()
            .map(|r| Ok(format!("{} MiB", num(r, "size_mib")?)))
            .collect::<Res<_>>()?;
        let mut p = Panel::bars(
            "std::fs in a child process, 1 file",
            groups,
            "MB/s (10^6 B/s)",
        );
        for (name, key, color) in [
            ("through the interposer (LD_PRELOAD)", "interposer", CAIRN),
            ("write() to /dev/shm", "dev_shm", ORANGE),
        ] {
            let mut s = Series::new(name, color, Style::Bar);
            for (i, r) in rows.iter().enumerate() {
                s = s.at(
                    i as f64,
                    stat(r, key)?.rate(num(r, "size_mib")? * MIB / 1e6),
                );
            }
            p.add(s);
        }
        figs.push(
            Figure::new(
                "preload",
                "Through the interposer libcairn-fs.so",
                format!("{ctx}. Target: >= 3 x /dev/shm. {MARKS}."),
            )
            .grid(1, 720, 440)
            .with([p]),
        );
    }
    Ok(figs)
}

/// `cairn-bench-transparent`: image write and restart against raw I/O, the overhead while
/// not checkpointing, a pinned loop after a restart.
fn transparent(v: &Value) -> Res<Vec<Figure>> {
    let mut figs = Vec::new();
    let settings = field(v, "settings")?;
    let ctx = format!(
        "{} cores, {} NUMA node(s), Linux {}; {} repetitions",
        num(settings, "cores")?,
        num(settings, "numa_nodes")?,
        text(settings, "kernel")?,
        num(settings, "reps")?
    );
    let mut image = Figure::new(
        "image",
        "Transparent checkpointing: image write and restart against raw I/O",
        String::new(),
    )
    .grid(2, 620, 440);
    let mut notes = Vec::new();
    if let Some(w) = get(v, "write") {
        let kinds = [
            (
                "image write (the library's figure)",
                "image write",
                "checkpoint_write",
                CAIRN,
            ),
            (
                "raw write(): 16 MiB pieces + fsync + rename",
                "raw write",
                "raw_write",
                BASE,
            ),
            (
                "stopping the threads (not in the write)",
                "stop",
                "checkpoint_stop",
                CAIRN_2,
            ),
        ];
        let stats: Vec<Stat> = kinds.iter().map(|k| stat(w, k.2)).collect::<Res<_>>()?;
        let (k, unit) = time_unit(max_hi(&stats));
        let mut p = Panel::bars(
            "1. Image write",
            kinds.iter().map(|k| k.1.to_string()).collect(),
            format!("time ({unit})"),
        );
        for (i, ((name, _, _, color), s)) in kinds.iter().zip(&stats).enumerate() {
            p.add(Series::new(*name, *color, Style::Bar).at(i as f64, s.scale(k)));
        }
        let target = num(w, "target")?;
        p.line(
            format!("target: raw write / {target} (bandwidth >= {target} x raw)"),
            stats[1].med / target * k,
            TARGET,
        );
        image.push(p);
        notes.push(format!(
            "image / raw bandwidth {:.2}x ({})",
            num(w, "bandwidth_vs_raw")?,
            yes_no(get(w, "meets_target").and_then(Value::as_bool))
        ));
    }
    if let Some(r) = get(v, "restart") {
        let kinds = [
            (
                "restart: exec of cairn-restore to the marker",
                "restart",
                "marker",
                CAIRN,
            ),
            (
                "restart: the library's restored: line",
                "library",
                "library",
                CAIRN_2,
            ),
            (
                "restart on one CPU (one fill thread)",
                "one CPU",
                "one_cpu",
                CAIRN_3,
            ),
            (
                "raw read(): 16 MiB pieces, pre-faulted buffer",
                "raw read",
                "raw_read",
                BASE,
            ),
            (
                "read into fresh memory (not pre-faulted)",
                "fresh read",
                "fresh_read",
                LIGHT,
            ),
        ];
        let stats: Vec<Option<Stat>> = kinds.iter().map(|k| get(r, k.2).and_then(series)).collect();
        let (k, unit) = time_unit(max_hi(stats.iter().flatten()));
        let mut p = Panel::bars(
            "2. Restart",
            kinds.iter().map(|k| k.1.to_string()).collect(),
            format!("time ({unit})"),
        );
        for (i, ((name, _, _, color), s)) in kinds.iter().zip(&stats).enumerate() {
            if let Some(s) = s {
                p.add(Series::new(*name, *color, Style::Bar).at(i as f64, s.scale(k)));
            }
        }
        let target = num(r, "target")?;
        let raw = stat(r, "raw_read")?;
        p.line(
            format!("target: {target} x raw read"),
            target * raw.med * k,
            TARGET,
        );
        image.push(p);
        notes.push(format!(
            "restart / raw read {:.2}x ({})",
            num(r, "restart_vs_raw")?,
            yes_no(get(r, "meets_target").and_then(Value::as_bool))
        ));
    }
    if !image.panels.is_empty() {
        image.subtitle = format!(
            "{ctx}; a process holding {} MiB, images under {} ({}); {}. {MARKS}.",
            num(settings, "mib")?,
            // The run's private directory was made in --dir: name that.
            Path::new(&text(settings, "dir")?)
                .parent()
                .map_or_else(|| "?".into(), |p| p.display().to_string()),
            if get(settings, "tmpfs").and_then(Value::as_bool) == Some(true) {
                "tmpfs"
            } else {
                "not tmpfs"
            },
            notes.join(", ")
        );
        figs.push(image);
    }
    if let Some(o) = get(v, "overhead") {
        let groups = vec![
            "loop".to_string(),
            "loop, CPU time".to_string(),
            "process, spawn to exit".to_string(),
        ];
        let keys = [
            ("plain", "preloaded"),
            ("cpu_plain", "cpu_preloaded"),
            ("wall_plain", "wall_preloaded"),
        ];
        let mut stats = Vec::new();
        for (a, b) in keys {
            stats.push((stat(o, a)?, stat(o, b)?));
        }
        let (k, unit) = time_unit(max_hi(stats.iter().flat_map(|(a, b)| [a, b])));
        let mut p = Panel::bars(
            "The compute program, never checkpointed",
            groups,
            format!("time ({unit})"),
        );
        let mut out = Panel::bars(
            "Outside the loop (exec, loader, constructor, exit)",
            vec!["outside the loop".into()],
            "time (ms)",
        );
        for (j, (name, color)) in [("plain", BASE), ("libcairn-ckpt.so preloaded", CAIRN)]
            .into_iter()
            .enumerate()
        {
            p.add(
                Series::new(name, color, Style::Bar).with(
                    stats
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (i as f64, if j == 0 { s.0 } else { s.1 }.scale(k))),
                ),
            );
            let key = if j == 0 {
                "outside_loop_plain"
            } else {
                "outside_loop_preloaded"
            };
            if let Some(s) = get(o, key).and_then(series) {
                out.add(Series::new(name, color, Style::Bar).at(0.0, s.scale(1e3)));
            }
        }
        figs.push(Figure::new(
            "overhead",
            "Overhead of the preloaded library while not checkpointing",
            format!(
                "{ctx}; {} pairs of runs, plain and preloaded back to back. Overhead of the loop {:+.2}% (median of pairs {:+.2}%, fastest runs {:+.2}%; target < {}%: {}); the plain runs' interquartile range is {:.1}% of their median. {MARKS}.",
                num(o, "pairs")?,
                num(o, "overhead")? * 100.0,
                num(o, "overhead_median_of_pairs")? * 100.0,
                num(o, "overhead_fastest")? * 100.0,
                fmt_num(num(o, "target")? * 100.0),
                yes_no(get(o, "meets_target").and_then(Value::as_bool)),
                num(o, "plain_iqr")? * 100.0,
            ),
        )
        .grid(2, 620, 440).with([p, out]));
    }
    if let Some(a) = get(v, "affinity") {
        let reps = arr(a, "reps")?;
        let mut groups: Vec<String> = (1..=reps.len()).map(|i| format!("rep {i}")).collect();
        let pooled = get(a, "pooled");
        if pooled.is_some() {
            groups.push("all pooled".into());
        }
        let kinds = [
            ("before the checkpoint", "before", BASE),
            ("after a restart, affinity on", "on", CAIRN),
            ("after a restart, affinity off", "off", ORANGE),
        ];
        let mut stats: Vec<[Stat; 3]> = Vec::new();
        for r in reps {
            let get3 = |kd: &str| -> Res<Stat> { stat(field(r, kd)?, "iteration") };
            stats.push([get3("before")?, get3("on")?, get3("off")?]);
        }
        if let Some(p) = pooled {
            stats.push([stat(p, "before")?, stat(p, "on")?, stat(p, "off")?]);
        }
        let (k, unit) = time_unit(max_hi(stats.iter().flatten()));
        // Log scale: single iterations that waited take ten times the median.
        let mut it = Panel::bars(
            "Iteration time of the pinned loop (both threads)",
            groups,
            format!("time ({unit}, log scale)"),
        )
        .log_y();
        for (j, (name, _, color)) in kinds.iter().enumerate() {
            it.add(
                Series::new(*name, *color, Style::Bar).with(
                    stats
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (i as f64, s[j].scale(k))),
                ),
            );
        }
        let mut ratio = Panel::xy(
            "After / before, median iteration time",
            "repetition",
            Scale::Linear,
            Fmt::Num,
            "after / before",
        )
        .free_y();
        for (name, key, color) in [
            ("affinity on", "on_vs_before", CAIRN),
            ("affinity off", "off_vs_before", ORANGE),
        ] {
            let pts: Vec<(f64, Stat)> = reps
                .iter()
                .enumerate()
                .filter_map(|(i, r)| Some(((i + 1) as f64, Stat::point(r.get(key)?.as_f64()?))))
                .collect();
            ratio.add(Series::new(name, color, Style::Measured).with(pts));
        }
        let target = num(a, "target")?;
        ratio.line(
            format!("target: within {}% of 1", fmt_num(target * 100.0)),
            1.0 - target,
            TARGET,
        );
        ratio.line(
            format!("target: within {}% of 1", fmt_num(target * 100.0)),
            1.0 + target,
            TARGET,
        );
        ratio.line("1 (as fast as before)", 1.0, REFERENCE);
        figs.push(Figure::new(
            "affinity",
            "A pinned streaming loop before a checkpoint and after a restart",
            format!(
                "{ctx}; {} MiB per thread, {} iterations per thread and phase. Median over repetitions of after / before: affinity on {:.3} ({}), off {:.3} ({}); error bars: fastest .. slowest iteration.",
                num(a, "stream_mib")?,
                num(a, "iters")?,
                num(a, "on_vs_before")?,
                yes_no(get(a, "meets_target_on").and_then(Value::as_bool)),
                num(a, "off_vs_before")?,
                yes_no(get(a, "meets_target_off").and_then(Value::as_bool)),
            ),
        )
        .grid(2, 640, 440).with([it, ratio]));
    }
    Ok(figs)
}

/// `cairn-bench-launch`: `cairn launch` / `checkpoint` / `restart` of a large process against
/// DMTCP, incremental on and off, a pipeline streaming and idle; one panel per part run.
fn launch(v: &Value) -> Res<Vec<Figure>> {
    let settings = field(v, "settings")?;
    let mut notes = Vec::new();
    let mut panels = Vec::new();
    // One panel of grouped bars: per group (checkpoint, restart, ...) the series that have it.
    let bars = |title: String, groups: &[&str], kinds: &[(&str, Vec<Option<Stat>>, RGBColor)]| {
        let all: Vec<Stat> = kinds
            .iter()
            .flat_map(|k| k.1.iter().flatten().copied())
            .collect();
        let (k, unit) = time_unit(max_hi(&all));
        let mut p = Panel::bars(
            title,
            groups.iter().map(|g| g.to_string()).collect(),
            format!("time ({unit})"),
        );
        for (name, stats, color) in kinds {
            let pts = stats
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|s| (i as f64, s.scale(k))));
            p.add(Series::new(*name, *color, Style::Bar).with(pts));
        }
        p
    };
    let st = |v: &Value, path: &[&str]| -> Option<Stat> {
        let mut x = v;
        for k in path {
            x = get(x, k)?;
        }
        series(x)
    };
    if let Some(a) = get(v, "vs_dmtcp") {
        let dmtcp = get(a, "dmtcp")
            .and_then(|d| get(d, "version"))
            .and_then(Value::as_str);
        panels.push(bars(
            format!("a. A {} MiB process, Cairn and DMTCP", num(a, "mib")?),
            &["checkpoint", "restart"],
            &[
                (
                    "a: Cairn (cairn checkpoint; exec of cairn restart to the first heartbeat)",
                    vec![st(a, &["cairn", "checkpoint"]), st(a, &["cairn", "restart"])],
                    CAIRN,
                ),
                (
                    "a: DMTCP (dmtcp_command --bcheckpoint; coordinator + dmtcp_restart to the first heartbeat)",
                    vec![st(a, &["dmtcp", "checkpoint"]), st(a, &["dmtcp", "restart"])],
                    ORANGE,
                ),
            ],
        ));
        if dmtcp.is_some() {
            notes.push(format!(
                "a: checkpoint Cairn / DMTCP {:.2} ({}), restart {:.2} ({})",
                num(a, "checkpoint_vs_dmtcp")?,
                yes_no(get(a, "meets_checkpoint").and_then(Value::as_bool)),
                num(a, "restart_vs_dmtcp")?,
                yes_no(get(a, "meets_restart").and_then(Value::as_bool)),
            ));
        }
    }
    if let Some(b) = get(v, "incremental") {
        panels.push(bars(
            format!(
                "b. Incremental on and off, {} checkpoints, {}% changed",
                num(b, "ckpts")?,
                fmt_num(num(b, "changed_permille")? / 10.0)
            ),
            &["first checkpoint", "later checkpoints", "restart"],
            &[
                (
                    "b: incremental on (restart: from the chain)",
                    vec![
                        st(b, &["on", "first"]),
                        st(b, &["on", "later"]),
                        st(b, &["on", "restart"]),
                    ],
                    CAIRN,
                ),
                (
                    "b: incremental off (restart: from a full image)",
                    vec![
                        st(b, &["off", "first"]),
                        st(b, &["off", "later"]),
                        st(b, &["off", "restart"]),
                    ],
                    BASE,
                ),
            ],
        ));
        notes.push(format!(
            "b: first checkpoint on / off {:.2} ({}), restart chain / full {:.2} ({})",
            num(b, "first_on_vs_off")?,
            yes_no(get(b, "meets_first").and_then(Value::as_bool)),
            num(b, "restart_chain_vs_full")?,
            yes_no(get(b, "meets_restart").and_then(Value::as_bool)),
        ));
    }
    if let Some(c) = get(v, "pipeline") {
        panels.push(bars(
            format!(
                "c. Pipeline of 3 x {} MiB at {} MB/s",
                num(c, "pipe_mib")?,
                num(c, "rate_mb_s")?
            ),
            &["checkpoint", "restart"],
            &[
                (
                    "c: Cairn, streaming",
                    vec![
                        st(c, &["streaming", "checkpoint"]),
                        st(c, &["streaming", "restart"]),
                    ],
                    CAIRN,
                ),
                (
                    "c: Cairn, idle (the baseline)",
                    vec![st(c, &["idle", "checkpoint"]), None],
                    BASE,
                ),
                (
                    "c: raw write of the images' bytes",
                    vec![st(c, &["raw_write"]), None],
                    LIGHT,
                ),
                (
                    "c: DMTCP, streaming",
                    vec![
                        st(c, &["dmtcp", "checkpoint"]),
                        st(c, &["dmtcp", "restart"]),
                    ],
                    ORANGE,
                ),
            ],
        ));
        notes.push(format!(
            "c: checkpoint streaming / idle {:.2} ({})",
            num(c, "streaming_vs_idle")?,
            yes_no(get(c, "meets_target").and_then(Value::as_bool)),
        ));
    }
    let dmtcp = get(settings, "dmtcp")
        .and_then(|d| get(d, "version"))
        .and_then(Value::as_str)
        .unwrap_or("DMTCP not installed");
    let cols = panels.len().max(1);
    Ok(vec![Figure::new(
        "parts",
        "cairn launch / checkpoint / restart of unmodified programs",
        format!(
            "{} cores, Linux {}, {} repetitions; {dmtcp}. {}. {MARKS}.",
            num(settings, "cores")?,
            text(settings, "kernel")?,
            num(settings, "reps")?,
            notes.join("; ")
        ),
    )
    .grid(cols, 560, 440)
    .with(panels)])
}

/// `bench/peers/run.sh`: Cairn (native and through the SCR, VeloC and FTI APIs) against those
/// libraries themselves, per redundancy scheme.
fn peers(v: &Value) -> Res<Vec<Figure>> {
    const SYSTEMS: [(&str, &str, RGBColor); 9] = [
        ("cairn-native", "Cairn, native API", RGBColor(31, 119, 180)),
        (
            "cairn-file",
            "Cairn, native file API",
            RGBColor(23, 190, 207),
        ),
        (
            "cairn-libscr",
            "Cairn through the SCR API",
            RGBColor(74, 152, 201),
        ),
        (
            "cairn-libveloc",
            "Cairn through the VeloC API",
            RGBColor(120, 180, 220),
        ),
        (
            "cairn-libfti",
            "Cairn through the FTI API",
            RGBColor(170, 207, 229),
        ),
        ("scr", "SCR", RGBColor(255, 127, 14)),
        ("veloc", "VeloC", RGBColor(214, 39, 40)),
        ("fti", "FTI", RGBColor(148, 103, 189)),
        (
            "plain",
            "plain write / read (baseline)",
            RGBColor(110, 110, 110),
        ),
    ];
    const SCHEMES: [&str; 5] = ["single", "partner", "xor", "rs", "async"];
    const OPS: [&str; 2] = ["checkpoint", "restart"];
    let runs = arr(v, "runs")?;
    // (scheme, op, system) -> seconds
    let mut cells: Vec<(String, String, String, Stat)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let secs: Vec<f64> = arr(r, "seconds")?
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        let Some(s) = Stat::of(&secs) else {
            return Err(format!("runs[{i}]: no times in \"seconds\"").into());
        };
        cells.push((text(r, "scheme")?, text(r, "op")?, text(r, "system")?, s));
    }
    let order = |known: &[&str], seen: Vec<String>| -> Vec<String> {
        let mut out: Vec<String> = known
            .iter()
            .filter(|k| seen.iter().any(|s| s == *k))
            .map(|k| k.to_string())
            .collect();
        for s in seen {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    };
    let schemes = order(&SCHEMES, cells.iter().map(|c| c.0.clone()).collect());
    let systems = order(
        &SYSTEMS.map(|s| s.0),
        cells.iter().map(|c| c.2.clone()).collect(),
    );
    let ranks = num(v, "ranks")?;
    let mib = num(v, "mib_per_rank")?;
    let mut figs = Vec::new();
    for scheme in &schemes {
        let mine: Vec<&(String, String, String, Stat)> =
            cells.iter().filter(|c| &c.0 == scheme).collect();
        let ops = order(&OPS, mine.iter().map(|c| c.1.clone()).collect());
        let (k, unit) = time_unit(max_hi(mine.iter().map(|c| &c.3)));
        let mut p = Panel::bars(
            format!("scheme {scheme}"),
            ops.clone(),
            format!("time ({unit})"),
        );
        for (j, sys) in systems.iter().enumerate() {
            let (name, color) = SYSTEMS
                .iter()
                .find(|s| s.0 == sys)
                .map(|s| (s.1.to_string(), s.2))
                .unwrap_or_else(|| (sys.clone(), palette(j + 3)));
            let pts = ops.iter().enumerate().filter_map(|(i, op)| {
                mine.iter()
                    .find(|c| &c.1 == op && &c.2 == sys)
                    .map(|c| (i as f64, c.3.scale(k)))
            });
            p.add(Series::new(name, color, Style::Bar).with(pts));
        }
        let file: String = scheme
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        figs.push(Figure::new(
            file,
            format!("Cairn against SCR, VeloC and FTI: scheme {scheme}"),
            format!("{ranks} ranks x {mib} MiB per rank; the same job with each library; time of a checkpoint and of a restart. {MARKS}."),
        )
        .grid(1, 760, 460).with([p]));
    }
    Ok(figs)
}

// ---- main --------------------------------------------------------------------------------

/// Plot `a.file`; returns the files written.
fn run(a: &Args) -> Res<Vec<PathBuf>> {
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| format!("cannot read {}: {e}", a.file.display()))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not JSON: {e}", a.file.display()))?;
    let part = match &a.part {
        Some(p) => p.clone(),
        None => detect(&v)
            .ok_or_else(|| {
                format!(
                    "{}: not the JSON of a benchmark part this program knows; name the part with --part ({})",
                    a.file.display(),
                    PARTS.join(", ")
                )
            })?
            .to_string(),
    };
    let figs = match part.as_str() {
        "ckpt" => ckpt(&v),
        "redundancy" => redundancy(&v),
        "nbody" => nbody(&v),
        "flush" => flush(&v),
        "reduce" => reduce(&v),
        "incremental" => incremental(&v),
        "fs" => fs(&v),
        "transparent" => transparent(&v),
        "launch" => launch(&v),
        "peers" => peers(&v),
        other => return Err(format!("unknown part {other:?}").into()),
    }
    .map_err(|e| format!("{} ({part}): {e}", a.file.display()))?;
    let out = match &a.out {
        Some(d) => d.clone(),
        None => a.file.parent().unwrap_or(Path::new(".")).join("plots"),
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut written = Vec::new();
    for fig in figs.iter().filter(|f| !f.panels.is_empty()) {
        let path = out.join(format!("{part}-{}.svg", fig.name));
        render(fig, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    if written.is_empty() {
        return Err(format!("{}: no results to plot ({part})", a.file.display()).into());
    }
    Ok(written)
}

fn main() {
    let a = cairn_bench::args_or_exit(PROG, USAGE, parse_args(std::env::args().skip(1).collect()));
    match run(&a) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
        }
        Err(e) => {
            eprintln!("{PROG}: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_bench::strings;

    #[test]
    fn arguments_parse() {
        let a = parse_args(strings(&["--part", "flush", "--out=o", "r.json"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            a,
            Args {
                file: PathBuf::from("r.json"),
                part: Some("flush".into()),
                out: Some(PathBuf::from("o")),
            }
        );
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&[])).is_err());
        assert!(parse_args(strings(&["a.json", "b.json"])).is_err());
        assert!(parse_args(strings(&["--part", "x", "a.json"])).is_err());
        assert!(parse_args(strings(&["--bogus", "a.json"])).is_err());
        assert!(parse_args(strings(&["--out"])).is_err());
    }

    #[test]
    fn stats_of_series() {
        let s = Stat::of(&[3.0, 1.0, f64::NAN, 2.0, 10.0]).unwrap();
        assert_eq!((s.med, s.lo, s.hi), (2.5, 1.0, 10.0));
        assert!(Stat::of(&[]).is_none());
        // The benchmark's median wins; the samples give the spread.
        let v = serde_json::json!({"median_s": 2.0, "samples_s": [1.0, 2.0, 4.0]});
        assert_eq!(
            series(&v),
            Some(Stat {
                med: 2.0,
                lo: 1.0,
                hi: 4.0
            })
        );
        let v = serde_json::json!({"median_s": 2.0, "min_s": 1.5, "max_s": 3.0});
        assert_eq!(
            series(&v),
            Some(Stat {
                med: 2.0,
                lo: 1.5,
                hi: 3.0
            })
        );
        // A rate: the fastest run is the highest.
        let r = Stat {
            med: 2.0,
            lo: 1.0,
            hi: 4.0,
        }
        .rate(8.0);
        assert_eq!((r.med, r.lo, r.hi), (4.0, 2.0, 8.0));
    }

    #[test]
    fn axes_read_well() {
        assert_eq!(
            ticks(Scale::Linear, 0.0, 10.0),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(
            ticks(Scale::Log, 0.9, 110.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        let t = ticks(Scale::Log, 1e-3, 1e5);
        let want = [1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5];
        assert_eq!(t.len(), want.len());
        assert!(t.iter().zip(want).all(|(a, b)| (a / b - 1.0).abs() < 1e-12));
        assert_eq!(
            [
                fmt_num(0.0),
                fmt_num(0.30000000000000004),
                fmt_num(2.5),
                fmt_num(12000.0),
                fmt_num(0.05)
            ],
            ["0", "0.3", "2.5", "12000", "0.05"].map(String::from)
        );
        assert_eq!(
            [fmt_bytes(4096.0), fmt_bytes(1048576.0)],
            ["4K", "1M"].map(String::from)
        );
        assert_eq!(time_unit(0.5), (1e3, "ms"));
        let (lo, hi) = range(Scale::Linear, &[2.0, 4.0], true);
        assert!(lo == 0.0 && hi > 4.0);
    }

    #[test]
    fn parts_are_recognised() {
        let j = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(
            detect(&j(
                r#"{"ranks":4,"nodes":1,"fixed_cost":null,"bandwidth":{}}"#
            )),
            Some("ckpt")
        );
        assert_eq!(
            detect(&j(r#"{"cpex":[],"codec":[],"engine":[]}"#)),
            Some("redundancy")
        );
        assert_eq!(detect(&j(r#"{"nbody":[]}"#)), Some("nbody"));
        assert_eq!(detect(&j(r#"{"global":"/tmp/x","fit":{}}"#)), Some("flush"));
        assert_eq!(
            detect(&j(r#"{"program":"cairn-bench-reduce"}"#)),
            Some("reduce")
        );
        assert_eq!(
            detect(&j(r#"{"rows":[],"block":65536,"compress":"none"}"#)),
            Some("incremental")
        );
        assert_eq!(
            detect(&j(r#"{"settings":{"spill_dir":"/tmp"}}"#)),
            Some("fs")
        );
        assert_eq!(
            detect(&j(r#"{"settings":{"restorer":"x"}}"#)),
            Some("transparent")
        );
        assert_eq!(
            detect(&j(r#"{"ranks":4,"mib_per_rank":1,"runs":[]}"#)),
            Some("peers")
        );
        assert_eq!(detect(&j(r#"{"x":1}"#)), None);
    }

    /// The peers' JSON (bench/peers/run.sh --json) becomes one SVG per scheme, with its
    /// text as SVG text elements.
    #[test]
    fn peers_plot_per_scheme() {
        let dir =
            std::env::temp_dir().join(format!("cairn-bench-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("peers.json");
        let mut runs = Vec::new();
        for (scheme, sys) in [
            ("single", "cairn-native"),
            ("single", "scr"),
            ("partner", "veloc"),
        ] {
            for op in ["checkpoint", "restart"] {
                runs.push(serde_json::json!({
                    "system": sys, "scheme": scheme, "op": op, "seconds": [0.5, 0.4, 0.7],
                }));
            }
        }
        let v = serde_json::json!({"ranks": 4, "mib_per_rank": 256, "runs": runs});
        std::fs::write(&file, v.to_string()).unwrap();
        let a = Args {
            file: file.clone(),
            part: None,
            out: Some(dir.join("plots")),
        };
        let files = run(&a).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["peers-single.svg", "peers-partner.svg"]);
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<text"));
        assert!(svg.contains("scheme single") && svg.contains("Cairn, native API"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
