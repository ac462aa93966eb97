//! The failure model: how often to checkpoint, given what a checkpoint costs and how often the
//! machine fails (Young's and Daly's intervals, the exact optimum of Daly's model, expected
//! efficiency), and a plan for a hierarchy of checkpoint levels.
//!
//! Everything here is a pure function of numbers; all times are in seconds. The model is
//! Daly's: failures arrive as a Poisson process with mean time between failures `M` (the
//! *MTBF*), a checkpoint takes `δ` seconds (the *cost*), a restart `R` seconds, and `τ` is the
//! compute time between two checkpoints (so one period of the cycle is `τ + δ`). The
//! derivations, the multi-level approximation and its limits are in `docs/model.md`.
//!
//! ```
//! use cairn_core::model::{daly, exact, format_duration, parse_duration, young};
//! let (cost, mtbf) = (parse_duration("5m").unwrap(), parse_duration("24h").unwrap());
//! assert_eq!(format_duration(young(cost, mtbf)), "2h 00m 00s");
//! assert_eq!(format_duration(daly(cost, mtbf)), "1h 56m 41s");
//! assert_eq!(format_duration(exact(cost, mtbf)), "1h 56m 41s");
//! ```

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

const MINUTE: f64 = 60.0;
const HOUR: f64 = 3600.0;
const DAY: f64 = 86_400.0;
/// A year is 365 days, the convention of MTBF figures quoted per node.
const YEAR: f64 = 365.0 * DAY;

/// The units [`parse_duration`] accepts, with their length in seconds.
const UNITS: [(&str, f64); 6] = [
    ("", 1.0),
    ("s", 1.0),
    ("m", MINUTE),
    ("h", HOUR),
    ("d", DAY),
    ("y", YEAR),
];

/// Parses a duration: a non-negative decimal number with an optional unit `s`, `m` (minutes),
/// `h`, `d` or `y` (365 days), e.g. `300`, `2.5`, `90s`, `5m`, `1.5h`, `3d`, `1y`; white space
/// around the number and the unit is allowed. A bare number is seconds.
///
/// The number is plain decimal on purpose: signs, exponents, `inf` and `nan`, which Rust's
/// float parser would take, are refused, so a typo never becomes a surprising value.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let bad = |why: &str| {
        format!(
            "bad duration {s:?}: {why}; expected a non-negative number with an optional unit \
             s, m, h, d or y (e.g. 300, 90s, 5m, 1.5h, 3d, 1y)"
        )
    };
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    if num.is_empty() {
        return Err(bad(match t.chars().next() {
            None => "empty",
            Some('-') => "negative",
            Some(_) => "no number",
        }));
    }
    if num.matches('.').count() > 1 || !num.contains(|c: char| c.is_ascii_digit()) {
        return Err(bad("not a number"));
    }
    let Some(&(_, scale)) = UNITS.iter().find(|(u, _)| *u == unit) else {
        return Err(bad(&format!("unknown unit {unit:?}")));
    };
    let value: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let secs = value * scale;
    if !secs.is_finite() {
        return Err(bad("too large"));
    }
    Ok(secs)
}

/// A duration for people: `0s`, `0.050s` under a second, `12.3s` under a minute, `9m 08s`
/// under an hour, `1h 56m 41s` under a day, `3d 04h 05m` under a year (of 365 days), then
/// `5y 12d 03h` (rounded to whole seconds, minutes or hours); `inf` for an infinite duration.
pub fn format_duration(secs: f64) -> String {
    if secs.is_nan() {
        return "nan".into();
    }
    if secs == 0.0 {
        return "0s".into();
    }
    if secs < 0.0 {
        return format!("-{}", format_duration(-secs));
    }
    if secs.is_infinite() {
        return "inf".into();
    }
    if secs < 0.9995 {
        return format!("{secs:.3}s");
    }
    if secs < 59.95 {
        return format!("{secs:.1}s");
    }
    if secs < DAY - 0.5 {
        let s = secs.round() as u64;
        let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
        return match h {
            0 => format!("{m}m {s:02}s"),
            _ => format!("{h}h {m:02}m {s:02}s"),
        };
    }
    if secs < YEAR - 30.0 {
        let m = (secs / MINUTE).round() as u64;
        return format!("{}d {:02}h {:02}m", m / 1440, m % 1440 / 60, m % 60);
    }
    let h = (secs / HOUR).round() as u64;
    format!("{}y {}d {:02}h", h / 8760, h % 8760 / 24, h % 24)
}

/// Young's first-order optimum interval, `√(2δM)`.
pub fn young(cost: f64, mtbf: f64) -> f64 {
    (2.0 * cost * mtbf).sqrt()
}

/// Daly's higher-order estimate of the optimum compute time between checkpoints:
/// `√(2δM)·[1 + ⅓·√(δ/2M) + (δ/2M)/9] − δ` while `δ < 2M`; from `δ ≥ 2M` on, `M`.
pub fn daly(cost: f64, mtbf: f64) -> f64 {
    if cost >= 2.0 * mtbf {
        return mtbf;
    }
    let r = cost / (2.0 * mtbf);
    young(cost, mtbf) * (1.0 + r.sqrt() / 3.0 + r / 9.0) - cost
}

/// The exact optimum of Daly's model: the compute time `τ` between checkpoints (the checkpoint
/// itself not included) that minimises the expected wall time,
/// `τ = M·[1 + W₀(−e^−(1 + δ/M))]`, where `W₀` is [`lambert_w0`]. It is always below `M`.
///
/// It comes from setting the derivative of [`wall_time_ratio`] with respect to `τ` to zero,
/// `(1 − τ/M)·e^((τ+δ)/M) = 1`; the restart cost shifts the wall time by a constant factor
/// and so does not move the optimum.
///
/// It is computed from that equation rather than through `W₀`: when `δ ≪ M`, the argument
/// `−e^−(1 + δ/M)` is a hair above `−1/e` and forming it as a double loses the digits of
/// `δ/M` that decide the answer (at `δ/M = 10⁻¹⁵` the result would be off by 8 %).
pub fn exact(cost: f64, mtbf: f64) -> f64 {
    mtbf * optimum_fraction(cost / mtbf)
}

/// The root `u` in `[0, 1)` of `−ln(1 − u) − u = ε`, i.e. of `(1 − u)·eᵘ = e^−ε`: the optimum
/// interval as a fraction of the MTBF for `ε = δ/M`. Equal to `1 + W₀(−e^−(1 + ε))`.
fn optimum_fraction(eps: f64) -> f64 {
    if eps.is_nan() {
        return f64::NAN;
    }
    if eps <= 0.0 {
        return 0.0;
    }
    // g(u) = −ln(1 − u) − u is increasing and convex on [0, 1). Both starting points lie at or
    // right of the root (g(u) ≥ u²/2, and g(u) ≥ −ln(1 − u) − 1), so Newton's steps go down
    // towards it without ever passing it.
    let mut u = (2.0 * eps).sqrt().min(-(-(1.0 + eps)).exp_m1());
    for _ in 0..100 {
        let step = (neg_ln_1m_minus(u) - eps) * (1.0 - u) / u;
        if step.is_nan() || step <= 0.0 {
            break;
        }
        u -= step;
        if step <= 1e-16 * u {
            break;
        }
    }
    u
}

/// `−ln(1 − u) − u` for `0 ≤ u < 1`, without the cancellation of the two terms for small `u`.
fn neg_ln_1m_minus(u: f64) -> f64 {
    if u >= 0.1 {
        return -(-u).ln_1p() - u;
    }
    // Σ_{k≥2} uᵏ/k; at u < 0.1 a term is below 10⁻¹⁷ of the first by k = 19.
    let mut sum = 0.0;
    let mut power = u * u;
    for k in 2..24 {
        sum += power / k as f64;
        power *= u;
    }
    sum
}

/// 1/e split into a double and the rounding error of that double, so that `x + 1/e` close to
/// the branch point keeps its significant digits.
const INV_E_HI: f64 = 0.367_879_441_171_442_3;
const INV_E_LO: f64 = -1.242_875_367_278_836_3e-17;

/// The principal branch `W₀` of the Lambert W function: the `w ≥ −1` with `w·eʷ = x`.
/// `None` for `x < −1/e`, where no real `w` exists, and for NaN; `W₀(∞) = ∞`.
///
/// Halley's iteration from a starting guess good enough that two or three steps reach full
/// double precision: near the branch point the series in `p = √(2(e·x + 1))`, for large `x`
/// the asymptotic `ln x − ln ln x`, and in between a logarithmic approximation.
pub fn lambert_w0(x: f64) -> Option<f64> {
    if x.is_nan() {
        return None;
    }
    if x == f64::INFINITY {
        return Some(x);
    }
    if x == 0.0 {
        return Some(0.0);
    }
    let from_branch = (x + INV_E_HI) + INV_E_LO;
    // A few units in the last place below −1/e are rounding, not a request for a complex value.
    if from_branch < -4.0 * f64::EPSILON * INV_E_HI {
        return None;
    }
    if from_branch <= 0.0 {
        return Some(-1.0);
    }
    let mut w = if from_branch < 0.25 {
        let p = (2.0 * std::f64::consts::E * from_branch).sqrt();
        -1.0 + p * (1.0 + p * (-1.0 / 3.0 + p * (11.0 / 72.0 + p * (-43.0 / 540.0))))
    } else if x < 3.0 {
        let l = x.ln_1p();
        l * (1.0 - (1.0 + l).ln() / (2.0 + l))
    } else {
        let (l1, l2) = (x.ln(), x.ln().ln());
        l1 - l2 + l2 / l1
    };
    for _ in 0..32 {
        let ew = w.exp();
        let f = w * ew - x;
        let wp1 = w + 1.0;
        if wp1 <= 0.0 || f == 0.0 {
            break;
        }
        let step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1));
        w -= step;
        if step.abs() <= 1e-15 * w.abs().max(1e-300) {
            break;
        }
    }
    Some(w.max(-1.0))
}

/// Which interval to use where one must be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formula {
    /// [`young`]
    Young,
    /// [`daly`]
    Daly,
    /// [`exact`]
    Exact,
}

impl Formula {
    /// `young`, `daly` or `exact`.
    pub fn parse(s: &str) -> Result<Formula, String> {
        match s {
            "young" => Ok(Formula::Young),
            "daly" => Ok(Formula::Daly),
            "exact" => Ok(Formula::Exact),
            _ => Err(format!(
                "unknown formula {s:?}: expected young, daly or exact"
            )),
        }
    }
}

impl FromStr for Formula {
    type Err = String;
    fn from_str(s: &str) -> Result<Formula, String> {
        Formula::parse(s)
    }
}

impl fmt::Display for Formula {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Formula::Young => "young",
            Formula::Daly => "daly",
            Formula::Exact => "exact",
        })
    }
}

/// The interval `f` gives for this cost and MTBF.
pub fn interval(f: Formula, cost: f64, mtbf: f64) -> f64 {
    match f {
        Formula::Young => young(cost, mtbf),
        Formula::Daly => daly(cost, mtbf),
        Formula::Exact => exact(cost, mtbf),
    }
}

/// Expected wall time per unit of useful work in Daly's model, checkpointing after every `tau`
/// seconds of compute: `(M/τ)·e^(R/M)·(e^((τ+δ)/M) − 1)`. Always at least `(1 + δ/τ)·e^(R/M)`,
/// so at least 1.
pub fn wall_time_ratio(tau: f64, cost: f64, mtbf: f64, restart: f64) -> f64 {
    (mtbf / tau) * (restart / mtbf).exp() * ((tau + cost) / mtbf).exp_m1()
}

/// The fraction of wall time spent on useful work, `1 /` [`wall_time_ratio`]: at most 1.
pub fn efficiency(tau: f64, cost: f64, mtbf: f64, restart: f64) -> f64 {
    1.0 / wall_time_ratio(tau, cost, mtbf, restart)
}

/// One level of a checkpoint hierarchy, as given to [`plan_levels`].
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    /// A name for output (`local`, `partner`, `global`, ...).
    pub name: String,
    /// What one checkpoint at this level costs, in seconds.
    pub cost: f64,
    /// The fraction of all failures that the levels below this one cannot recover from but
    /// this one can. The shares of all levels sum to 1: the last level recovers everything.
    pub share: f64,
}

/// What [`plan_levels`] advises for one level. Times are in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelPlan {
    pub name: String,
    /// The level's checkpoint cost.
    pub cost: f64,
    /// The mean time between the failures this level must recover from: those its own share
    /// and every higher level's share stand for.
    pub mtbf: f64,
    /// The intervals (compute time between this level's checkpoints) of each formula.
    pub young: f64,
    pub daly: f64,
    pub exact: f64,
    /// The interval of the formula asked for.
    pub chosen: f64,
    /// Every how many checkpoints of the previous level this level takes one (1 for the
    /// first level): `chosen` over the previous level's `chosen`, rounded, at least 1.
    pub every: u64,
    /// The [`efficiency`] of this level alone, with its own MTBF, interval and cost.
    pub efficiency: f64,
}

/// Plans a hierarchy of checkpoint levels, cheapest first, for a system with this MTBF and
/// restart cost: level `i` must recover every failure that needs level `i` or a higher one,
/// so it sees failures at the rate `λ·Σ_{j≥i} share_j`, i.e. with the MTBF
/// `M_i = M / Σ_{j≥i} share_j`, and gets the intervals of a single level with that MTBF.
///
/// Each level is optimised as if it were alone; see `docs/model.md` for what that neglects.
pub fn plan_levels(
    levels: &[Level],
    mtbf: f64,
    restart: f64,
    formula: Formula,
) -> Result<Vec<LevelPlan>, String> {
    if levels.is_empty() {
        return Err("no checkpoint levels given".into());
    }
    if !(mtbf > 0.0 && mtbf.is_finite()) {
        return Err(format!("the MTBF must be positive and finite, not {mtbf}"));
    }
    if !(restart >= 0.0 && restart.is_finite()) {
        return Err(format!(
            "the restart cost must be zero or positive and finite, not {restart}"
        ));
    }
    for l in levels {
        if !(l.cost > 0.0 && l.cost.is_finite()) {
            return Err(format!(
                "level {:?}: the checkpoint cost must be positive and finite, not {}",
                l.name, l.cost
            ));
        }
        if !(l.share >= 0.0 && l.share <= 1.0) {
            return Err(format!(
                "level {:?}: the share of failures must be between 0 and 1, not {}",
                l.name, l.share
            ));
        }
    }
    let total: f64 = levels.iter().map(|l| l.share).sum();
    if (total - 1.0).abs() > 1e-6 {
        // Rounded, so that 0.7 + 0.4 reads as 1.1 and not as 1.0999999999999999.
        let total = (total * 1e9).round() / 1e9;
        return Err(format!(
            "the shares of failures of the levels sum to {total}, not 1 (each level's share is \
             the fraction of all failures it is the cheapest level to recover from)"
        ));
    }
    let last = &levels[levels.len() - 1];
    if last.share <= 0.0 {
        return Err(format!(
            "the last level {:?} has a share of 0: it would never be needed (drop it, or give \
             it the failures that only it can recover from)",
            last.name
        ));
    }
    let mut plans: Vec<LevelPlan> = Vec::with_capacity(levels.len());
    let mut covered = 0.0;
    for (i, l) in levels.iter().enumerate().rev() {
        covered += l.share;
        // The shares of all levels sum to 1, so the first level covers every failure: use
        // exactly M there instead of M divided by a sum that rounding left a hair off 1.
        let m = if i == 0 { mtbf } else { mtbf / covered };
        let (young, daly, exact) = (young(l.cost, m), daly(l.cost, m), exact(l.cost, m));
        let chosen = interval(formula, l.cost, m);
        plans.push(LevelPlan {
            name: l.name.clone(),
            cost: l.cost,
            mtbf: m,
            young,
            daly,
            exact,
            chosen,
            every: 1,
            efficiency: efficiency(chosen, l.cost, m, restart),
        });
    }
    plans.reverse();
    for i in 1..plans.len() {
        let k = (plans[i].chosen / plans[i - 1].chosen).round();
        plans[i].every = if k >= 1.0 { k as u64 } else { 1 };
    }
    Ok(plans)
}

/// The expected efficiency of the whole hierarchy, approximated as the product of the levels'
/// own efficiencies. That treats the time each level loses (writing its checkpoints, redoing
/// work after its failures) as independent of the others' and small; it neither counts that
/// a higher level's checkpoint can stand in for a lower one taken at the same moment nor the
/// interplay of the levels' schedules (see `docs/model.md`).
pub fn combined_efficiency(plans: &[LevelPlan]) -> f64 {
    plans.iter().map(|p| p.efficiency).product()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: f64 = 60.0;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn parses_durations() {
        let ok = [
            ("300", 300.0),
            ("2.5", 2.5),
            ("90s", 90.0),
            ("5m", 300.0),
            ("24h", 86_400.0),
            ("3d", 259_200.0),
            ("1y", 31_536_000.0),
            ("1.5h", 5400.0),
            (" 5 m ", 300.0),
            ("0", 0.0),
            (".5s", 0.5),
            ("10.", 10.0),
        ];
        for (s, v) in ok {
            assert_eq!(parse_duration(s), Ok(v), "{s:?}");
        }
        for s in [
            "", "  ", "-5", "-5m", "+5", "nan", "inf", "1e3", "5x", "5 min", "m", ".", "1.2.3",
            "5mm", "h5",
        ] {
            let e = parse_duration(s).unwrap_err();
            assert!(e.contains(&format!("{s:?}")), "{e}");
            assert!(e.contains("s, m, h, d or y"), "{e}");
        }
        assert!(parse_duration("5x")
            .unwrap_err()
            .contains("unknown unit \"x\""));
        assert!(parse_duration("-5m").unwrap_err().contains(": negative;"));
        assert!(parse_duration("-5m").unwrap_err().contains(": negative;"));
        assert!(parse_duration(&"9".repeat(400))
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(0.05), "0.050s");
        assert_eq!(format_duration(12.34), "12.3s");
        assert_eq!(format_duration(59.96), "1m 00s");
        assert_eq!(format_duration(548.0), "9m 08s");
        assert_eq!(format_duration(7001.4), "1h 56m 41s");
        assert_eq!(format_duration(86_399.6), "1d 00h 00m");
        assert_eq!(
            format_duration(3.0 * DAY + 4.0 * HOUR + 5.0 * MIN),
            "3d 04h 05m"
        );
        assert_eq!(format_duration(YEAR - 29.0), "1y 0d 00h");
        assert_eq!(
            format_duration(5.0 * YEAR + 12.0 * DAY + 3.4 * HOUR),
            "5y 12d 03h"
        );
        assert_eq!(format_duration(0.0), "0s");
        assert_eq!(format_duration(f64::INFINITY), "inf");
        assert_eq!(format_duration(-90.0), "-1m 30s");
    }

    #[test]
    fn formulas_parse_and_print() {
        for f in [Formula::Young, Formula::Daly, Formula::Exact] {
            assert_eq!(Formula::parse(&f.to_string()), Ok(f));
            assert_eq!(f.to_string().parse::<Formula>(), Ok(f));
        }
        assert!(Formula::parse("Daly")
            .unwrap_err()
            .contains("young, daly or exact"));
    }

    #[test]
    fn lambert_w_known_values() {
        let e = std::f64::consts::E;
        assert_eq!(lambert_w0(0.0), Some(0.0));
        assert!(close(lambert_w0(e).unwrap(), 1.0, 1e-15));
        assert_eq!(lambert_w0(-1.0 / e), Some(-1.0));
        assert!(close(
            lambert_w0(1.0).unwrap(),
            0.567_143_290_409_783_8,
            1e-15
        ));
        assert_eq!(lambert_w0(-0.368), None);
        assert_eq!(lambert_w0(f64::NAN), None);
        assert_eq!(lambert_w0(f64::INFINITY), Some(f64::INFINITY));
    }

    #[test]
    fn lambert_w_inverts_w_exp_w() {
        let e = std::f64::consts::E;
        let mut xs: Vec<f64> = (0..=2000)
            .map(|i| -1.0 / e + (i as f64 / 2000.0).powi(3) * (1.0 / e))
            .collect();
        xs.extend((0..=600).map(|i| 10f64.powf(-8.0 + i as f64 * 14.0 / 600.0)));
        xs.extend((1..=200).map(|i| -(10f64.powf(-10.0 + i as f64 * 9.5 / 200.0))));
        for x in xs.into_iter().filter(|&x| x >= -1.0 / e && x <= 1e6) {
            let w = lambert_w0(x).unwrap();
            assert!(w >= -1.0, "W({x}) = {w}");
            let back = w * w.exp();
            assert!(
                (back - x).abs() <= 1e-14 * x.abs().max(1e-300) + 1e-16,
                "W({x}) = {w}: w·e^w = {back}"
            );
        }
    }

    /// Daly's examples, δ = 5 min, checked independently (bisection for W in Python).
    #[test]
    fn daly_published_cases() {
        let d = 5.0 * MIN;
        // (M, Young, Daly, exact), minutes.
        let cases = [
            (24.0 * 60.0, 120.0, 116.69, 116.69),
            (6.0 * 60.0, 60.0, 56.71, 56.71),
            (15.0, 12.247, 9.141, 9.167),
        ];
        for (m, y, dl, ex) in cases {
            let m = m * MIN;
            assert!(close(young(d, m) / MIN, y, 0.005), "young {m}");
            assert!(close(daly(d, m) / MIN, dl, 0.005), "daly {m}");
            assert!(close(exact(d, m) / MIN, ex, 0.005), "exact {m}");
            assert!(close(interval(Formula::Exact, d, m), exact(d, m), 0.0));
        }
    }

    #[test]
    fn exact_is_one_plus_lambert_w() {
        for eps in [1e-4f64, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 10.0, 40.0] {
            let w = lambert_w0(-(-(1.0 + eps)).exp()).unwrap();
            let (got, want) = (exact(eps * 1000.0, 1000.0), 1000.0 * (1.0 + w));
            // W₀'s argument carries the rounding of e^−(1+ε), amplified near the branch point.
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "ε {eps}: {got} vs {want}"
            );
        }
        assert_eq!(exact(0.0, 1000.0), 0.0);
        assert_eq!(exact(1e6, 1.0), 1.0);
    }

    #[test]
    fn exact_keeps_its_digits() {
        // References from bisection on −ln(1 − u) − u = δ/M in 60-digit decimal arithmetic
        // (Python's decimal module).
        for (d, m, want) in [
            (1.0, 1e9, 44_720.692_885_813_66),
            (1e-3, 1e12, 44_721.358_883_329_13),
            (300.0, 86_400.0, 7_001.404_399_599_536),
            (300.0, 900.0, 549.990_169_256_142),
        ] {
            let got = exact(d, m);
            assert!(
                (got - want).abs() <= 1e-13 * want,
                "δ {d} M {m}: {got} vs {want}"
            );
        }
        // For δ ≪ M, Daly's estimate is accurate to many digits, and both lie below Young's.
        for (d, m) in [(1.0, 1e9), (1e-6, 1e15)] {
            let (e, dl) = (exact(d, m), daly(d, m));
            assert!((e - dl).abs() <= 1e-12 * dl, "δ {d} M {m}: {e} vs {dl}");
            assert!(e < young(d, m));
        }
    }

    #[test]
    fn cost_of_two_mtbf_or_more_gives_mtbf() {
        assert_eq!(daly(600.0, 300.0), 300.0);
        assert_eq!(daly(601.0, 300.0), 300.0);
        let e = exact(600.0, 300.0);
        assert!(e > 0.0 && e < 300.0);
    }

    #[test]
    fn exact_maximises_efficiency() {
        for (d, m, r) in [
            (300.0, 86_400.0, 60.0),
            (300.0, 21_600.0, 0.0),
            (300.0, 900.0, 120.0),
            (10.0, 1e7, 5.0),
            (1000.0, 100.0, 0.0),
        ] {
            let t = exact(d, m);
            let best = efficiency(t, d, m, r);
            assert!(best <= 1.0 && best > 0.0);
            for other in [t * 0.95, t * 1.05, young(d, m), daly(d, m)] {
                assert!(best >= efficiency(other, d, m, r), "δ {d} M {m} τ {other}");
            }
        }
    }

    #[test]
    fn efficiency_values() {
        // No failures to speak of and free checkpoints: everything is useful work.
        assert!(close(efficiency(100.0, 1e-9, 1e15, 0.0), 1.0, 1e-9));
        // δ = 5 min, M = 24 h at the exact optimum (computed independently).
        assert!(close(
            efficiency(exact(300.0, 86_400.0), 300.0, 86_400.0, 0.0),
            0.918_965,
            1e-6
        ));
        assert!(close(
            wall_time_ratio(3600.0, 0.0, 3600.0, 0.0),
            1f64.exp_m1(),
            1e-15
        ));
    }

    fn level(name: &str, cost: f64, share: f64) -> Level {
        Level {
            name: name.into(),
            cost,
            share,
        }
    }

    #[test]
    fn one_level_plan_is_the_single_level_model() {
        let p = plan_levels(&[level("g", 300.0, 1.0)], 86_400.0, 60.0, Formula::Daly).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].mtbf, p[0].every), (86_400.0, 1));
        assert_eq!(p[0].chosen, daly(300.0, 86_400.0));
        assert_eq!(
            p[0].efficiency,
            efficiency(p[0].chosen, 300.0, 86_400.0, 60.0)
        );
        assert_eq!(combined_efficiency(&p), p[0].efficiency);
    }

    #[test]
    fn three_level_plan() {
        let levels = [
            level("local", 10.0, 0.7),
            level("partner", 40.0, 0.2),
            level("global", 300.0, 0.1),
        ];
        let m = 3600.0;
        let p = plan_levels(&levels, m, 30.0, Formula::Exact).unwrap();
        assert!(close(p[0].mtbf, m, 0.0));
        assert!(close(p[1].mtbf, m / 0.3, 1e-9));
        assert!(close(p[2].mtbf, m / 0.1, 1e-9));
        for (i, q) in p.iter().enumerate() {
            assert_eq!(q.chosen, q.exact);
            assert_eq!(q.exact, exact(levels[i].cost, q.mtbf));
        }
        assert!(p[0].chosen < p[1].chosen && p[1].chosen < p[2].chosen);
        assert_eq!(p[0].every, 1);
        assert_eq!(p[1].every, (p[1].chosen / p[0].chosen).round() as u64);
        assert!(p[2].every >= 1);
        let c = combined_efficiency(&p);
        assert!(c > 0.0 && c < p.iter().map(|q| q.efficiency).fold(1.0, f64::min));
    }

    #[test]
    fn every_is_at_least_one() {
        // A dearer level that must cover almost every failure checkpoints about as often as a
        // cheap one; the ratio rounds to 1, never to 0.
        let levels = [level("a", 100.0, 0.0), level("b", 10.0, 1.0)];
        let p = plan_levels(&levels, 3600.0, 0.0, Formula::Young).unwrap();
        assert!(p[1].chosen < p[0].chosen);
        assert_eq!(p[1].every, 1);
    }

    #[test]
    fn plan_errors() {
        let err = |levels: &[Level], m: f64, r: f64| {
            plan_levels(levels, m, r, Formula::Exact).unwrap_err()
        };
        assert!(err(&[], 100.0, 0.0).contains("no checkpoint levels"));
        assert!(err(&[level("a", 0.0, 1.0)], 100.0, 0.0).contains("\"a\": the checkpoint cost"));
        assert!(err(&[level("a", f64::NAN, 1.0)], 100.0, 0.0).contains("cost"));
        assert!(err(&[level("a", 1.0, 1.0)], 0.0, 0.0).contains("MTBF"));
        assert!(err(&[level("a", 1.0, 1.0)], 100.0, -1.0).contains("restart"));
        let two = |s0: f64, s1: f64| [level("a", 1.0, s0), level("b", 2.0, s1)];
        assert!(err(&two(-0.1, 1.1), 100.0, 0.0).contains("\"a\": the share"));
        assert!(err(&two(0.7, 0.4), 100.0, 0.0).contains("sum to 1.1"));
        assert!(err(&two(0.5, 0.4), 100.0, 0.0).contains("not 1"));
        assert!(err(&two(1.0, 0.0), 100.0, 0.0).contains("\"b\" has a share of 0"));
        assert!(plan_levels(&two(0.6, 0.4 + 1e-9), 100.0, 0.0, Formula::Exact).is_ok());
    }
}
