//! `cairn interval`: how often to checkpoint, from the MTBF and the checkpoint cost of one or
//! more levels, by Young's and Daly's formulas and the exact optimum of Daly's model
//! (`cairn_core::model`). Needs no tier and no configuration.

use anyhow::{bail, Result};
use cairn_core::model::{self, Formula, Level, LevelPlan};
use clap::{ArgGroup, Args};

pub const HELP: &str = "\
An interval is the compute time between two checkpoints (the checkpoint itself not
included). Failures are taken to arrive at random (a Poisson process) with the system MTBF,
which is --mtbf, or --node-mtbf divided by --nodes. Durations are a number with an optional
unit s, m, h, d or y (365 days): 300, 90s, 5m, 1.5h, 3d, 1y.

Several levels (--level, cheapest first) each get the interval of a single level whose MTBF
is that of the failures it must recover from: a level's SHARE is the fraction of all failures
the levels before it cannot recover from but it can; the shares sum to 1. 'every' says every
how many checkpoints of the previous level one of this level is taken; the efficiency is the
expected fraction of wall time spent on useful work, per level and combined (an
approximation: see docs/model.md).

Examples:
  cairn interval --mtbf 24h --cost 5m
  cairn interval --node-mtbf 5y --nodes 1000 --restart 2m \\
      --level local=10s:0.7 --level partner=40s:0.2 --level global=5m:0.1
  cairn interval --mtbf 6h --cost 5m --formula daly --json";

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("system").args(["mtbf", "node_mtbf"]).required(true)))]
#[command(group(ArgGroup::new("levels").args(["cost", "level"]).required(true)))]
pub struct IntervalArgs {
    /// Mean time between failures of the whole system (job)
    #[arg(long, value_name = "DURATION", value_parser = model::parse_duration)]
    mtbf: Option<f64>,
    /// Mean time between failures of one node (with --nodes, instead of --mtbf)
    #[arg(long, value_name = "DURATION", value_parser = model::parse_duration,
          requires = "nodes")]
    node_mtbf: Option<f64>,
    /// Nodes of the job: the system MTBF is --node-mtbf divided by this
    #[arg(long, value_name = "N", requires = "node_mtbf",
          value_parser = clap::value_parser!(u64).range(1..))]
    nodes: Option<u64>,
    /// Cost of one checkpoint (one level; use --level for several)
    #[arg(long, value_name = "DURATION", value_parser = model::parse_duration)]
    cost: Option<f64>,
    /// A checkpoint level NAME=COST[:SHARE], repeated for each level, cheapest first; SHARE
    /// may be left out for the last level (it gets the rest) or for a single level
    #[arg(long, value_name = "NAME=COST[:SHARE]", value_parser = parse_level)]
    level: Vec<LevelArg>,
    /// Time to restart from a checkpoint (reading it back, relaunching)
    #[arg(long, value_name = "DURATION", default_value = "0",
          value_parser = model::parse_duration)]
    restart: f64,
    /// Interval used for 'every' and the efficiency: young, daly or exact
    #[arg(long, value_name = "FORMULA", default_value = "exact",
          value_parser = Formula::parse)]
    formula: Formula,
    /// Print one JSON object instead of a table
    #[arg(long)]
    json: bool,
}

/// One `--level` as given: the share may be missing.
#[derive(Debug, Clone)]
struct LevelArg {
    name: String,
    cost: f64,
    share: Option<f64>,
}

fn parse_level(s: &str) -> Result<LevelArg, String> {
    let Some((name, rest)) = s.split_once('=') else {
        return Err(format!(
            "{s:?} is not NAME=COST[:SHARE], e.g. local=10s:0.7"
        ));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{s:?} has no level name before '='"));
    }
    let (cost, share) = match rest.split_once(':') {
        Some((c, sh)) => (c, Some(sh)),
        None => (rest, None),
    };
    let cost = model::parse_duration(cost)?;
    let share = match share {
        None => None,
        Some(t) => match t.trim().parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Some(v),
            _ => {
                return Err(format!(
                    "level {name:?}: bad share {t:?}: expected a fraction of failures between \
                     0 and 1, e.g. 0.7"
                ))
            }
        },
    };
    Ok(LevelArg {
        name: name.to_string(),
        cost,
        share,
    })
}

/// The levels with every share filled in: all given, or all but the last (which gets the
/// rest), or none for a single level (which gets them all).
fn levels(args: &IntervalArgs) -> Result<Vec<Level>> {
    let given: Vec<LevelArg> = match args.cost {
        Some(cost) => vec![LevelArg {
            name: "checkpoint".into(),
            cost,
            share: Some(1.0),
        }],
        None => args.level.clone(),
    };
    let n = given.len();
    let missing = given.iter().filter(|l| l.share.is_none()).count();
    let rest = match (missing, given.last().map(|l| l.share.is_none())) {
        (0, _) => None,
        (1, Some(true)) => {
            let sum: f64 = given[..n - 1].iter().filter_map(|l| l.share).sum();
            if sum > 1.0 + 1e-6 {
                bail!(
                    "the shares of failures of the levels before {:?} sum to {}, more than 1",
                    given[n - 1].name,
                    (sum * 1e9).round() / 1e9
                );
            }
            Some((1.0 - sum).max(0.0))
        }
        _ => bail!(
            "give every --level a share of failures (NAME=COST:SHARE), or every level but \
             the last, which then gets the rest"
        ),
    };
    Ok(given
        .into_iter()
        .map(|l| Level {
            share: l.share.or(rest).unwrap_or(0.0),
            name: l.name,
            cost: l.cost,
        })
        .collect())
}

pub fn run(args: &IntervalArgs) -> Result<()> {
    let d = model::format_duration;
    let (mtbf, source) = match (args.mtbf, args.node_mtbf, args.nodes) {
        (Some(m), None, None) => (m, String::new()),
        (None, Some(m), Some(n)) => (m / n as f64, format!(" (node MTBF {} / {n} nodes)", d(m))),
        // clap lets --nodes through beside --mtbf (its group satisfies the requirement).
        _ => bail!("--nodes goes with --node-mtbf, not with --mtbf"),
    };
    if args.cost.is_some_and(|c| c <= 0.0) {
        bail!("--cost must be longer than 0");
    }
    let plans = model::plan_levels(&levels(args)?, mtbf, args.restart, args.formula)
        .map_err(anyhow::Error::msg)?;
    let combined = model::combined_efficiency(&plans);
    if args.json {
        let out = serde_json::json!({
            "mtbf_seconds": mtbf,
            "restart_seconds": args.restart,
            "formula": args.formula.to_string(),
            "levels": plans,
            "efficiency": combined,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let header = format!(
            "system MTBF {}{source}, restart {}; every and efficiency use the {} interval\n",
            d(mtbf),
            d(args.restart),
            args.formula
        );
        print!("{header}{}", table(&plans, combined));
    }
    Ok(())
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The table of levels and the combined efficiency.
fn table(plans: &[LevelPlan], combined: f64) -> String {
    let d = model::format_duration;
    let mut rows = vec![[
        "level",
        "cost",
        "MTBF covered",
        "Young",
        "Daly",
        "exact",
        "every",
        "efficiency",
    ]
    .map(String::from)];
    for p in plans {
        rows.push([
            p.name.clone(),
            d(p.cost),
            d(p.mtbf),
            d(p.young),
            d(p.daly),
            d(p.exact),
            p.every.to_string(),
            percent(p.efficiency),
        ]);
    }
    // The name is text and left-aligned; every other column is a quantity, right-aligned.
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = format!("{:<w$}", r[0], w = widths[0]);
        for (cell, w) in r.iter().zip(&widths).skip(1) {
            line.push_str(&format!("  {cell:>w$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&format!("expected efficiency: {}", percent(combined)));
    if plans.len() > 1 {
        out.push_str(" (product of the levels')");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_levels() {
        let l = parse_level("local=10s:0.7").unwrap();
        assert_eq!(
            (l.name.as_str(), l.cost, l.share),
            ("local", 10.0, Some(0.7))
        );
        let l = parse_level("global = 5m").unwrap();
        assert_eq!((l.name.as_str(), l.cost, l.share), ("global", 300.0, None));
        assert!(parse_level("local").unwrap_err().contains("NAME=COST"));
        assert!(parse_level("=5m").unwrap_err().contains("no level name"));
        assert!(parse_level("a=5x").unwrap_err().contains("\"5x\""));
        assert!(parse_level("a=5m:1.5")
            .unwrap_err()
            .contains("bad share \"1.5\""));
        assert!(parse_level("a=5m:x").unwrap_err().contains("bad share"));
    }

    #[test]
    fn table_lines_up() {
        let levels = [
            Level {
                name: "local".into(),
                cost: 10.0,
                share: 0.8,
            },
            Level {
                name: "global".into(),
                cost: 300.0,
                share: 0.2,
            },
        ];
        let plans = model::plan_levels(&levels, 3600.0, 60.0, Formula::Exact).unwrap();
        let t = table(&plans, 0.5);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert_eq!(lines[0].len(), lines[1].len());
        assert_eq!(lines[1].len(), lines[2].len());
        assert!(lines[0].starts_with("level ") && lines[0].ends_with("efficiency"));
        assert!(lines[1].starts_with("local ") && lines[2].starts_with("global "));
        assert_eq!(
            lines[3],
            "expected efficiency: 50.0% (product of the levels')"
        );
    }
}
