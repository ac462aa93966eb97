//! Text output of `cairn list`, `inspect` and `verify`: tables, sizes, times.

use cairn_core::inventory::{
    CkptCheck, CkptRecord, FileKind, Inspection, Inventory, ParitySet, Place, Verdict,
};
use std::fmt::Write;

/// `812 B`, `10.0 KiB`, `2.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut x = n as f64 / 1024.0;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", UNITS[u])
}

/// Nanoseconds as milliseconds with three decimals.
pub fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn utc(unix_ms: u64) -> String {
    cairn_core::clock::utc_text((unix_ms / 1000) as i64)
}

/// Where the inventory looked, for "nothing found" messages.
pub fn roots(inv: &Inventory) -> String {
    match inv.local_location() {
        Some(l) => format!("{l} (local) and {} (global)", inv.global_root().display()),
        None => format!("{} (global)", inv.global_root().display()),
    }
}

/// Left-aligned columns separated by two spaces.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn ranks_cell(r: &CkptRecord) -> String {
    match r.world_size {
        Some(w) => format!("{}/{w}", r.ranks.len()),
        None => format!("{}/?", r.ranks.len()),
    }
}

/// `full`, or `incr of v<base>` for an incremental checkpoint (adding `, full on global`
/// when a flush stored a merged copy there).
fn chain_cell(r: &CkptRecord) -> String {
    match r.base {
        None => "full".into(),
        Some(b) if r.copies.iter().any(|c| c.place == Place::Global) => {
            format!("incr of v{b}, full on global")
        }
        Some(b) => format!("incr of v{b}"),
    }
}

/// The `cairn list` table, followed by each checkpoint's problems.
pub fn list(inv: &Inventory, name: Option<&str>, records: &[CkptRecord]) -> String {
    if records.is_empty() {
        return match name {
            Some(n) => format!("no checkpoints named {n} under {}\n", roots(inv)),
            None => format!("no checkpoints under {}\n", roots(inv)),
        };
    }
    let mut rows = vec![[
        "NAME",
        "VERSION",
        "STATE",
        "CHAIN",
        "SCHEME",
        "PROTECTION",
        "TIERS",
        "RANKS",
        "SIZE",
        "CREATED (UTC)",
    ]
    .map(String::from)
    .to_vec()];
    for r in records {
        rows.push(vec![
            r.name.clone(),
            r.version.to_string(),
            r.state.to_string(),
            chain_cell(r),
            r.scheme.clone().unwrap_or_else(|| "-".into()),
            r.protection.short().to_string(),
            r.tiers.join(", "),
            ranks_cell(r),
            bytes(r.bytes),
            r.created_unix_ms.map(utc).unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = table(&rows);
    let troubled: Vec<&CkptRecord> = records
        .iter()
        .filter(|r| !r.problems.is_empty() || r.protection.is_impaired())
        .collect();
    if !troubled.is_empty() {
        out.push('\n');
        for r in troubled {
            if r.protection.is_impaired() {
                let _ = writeln!(
                    out,
                    "{} v{}: {}{}",
                    r.name,
                    r.version,
                    r.protection,
                    rebuild_hint(r)
                );
            }
            for p in &r.problems {
                let _ = writeln!(out, "{} v{}: {p}", r.name, r.version);
            }
        }
    }
    out
}

/// How to rebuild a degraded checkpoint, when it can be.
fn rebuild_hint(r: &CkptRecord) -> String {
    if !r.protection.rebuildable || !r.protection.is_impaired() {
        return String::new();
    }
    let n = r.world_size.map_or("N".to_string(), |w| w.to_string());
    format!(
        "; `mpirun -n {n} cairn rebuild {} {}` with the job's configuration rebuilds it",
        r.name, r.version
    )
}

/// `xor set 0 of ranks 0 (16.1 KiB), 2 (16.1 KiB), m 1, segment 8.0 KiB`
fn set_phrase(s: &ParitySet) -> String {
    let members: Vec<String> = s
        .members
        .iter()
        .map(|m| format!("{} ({})", m.rank, bytes(m.bytes)))
        .collect();
    format!(
        "{} set {} of ranks {}, m {}, segment {}",
        s.codec,
        s.set_id,
        members.join(", "),
        s.m,
        bytes(s.segment)
    )
}

fn join_ranks(rs: &[u32]) -> String {
    rs.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// The `cairn inspect` report.
pub fn inspect(ins: &Inspection) -> String {
    let r = &ins.record;
    let mut out = String::new();
    let _ = writeln!(out, "checkpoint {} v{}", r.name, r.version);
    let _ = writeln!(out, "  state      {}", r.state);
    let _ = writeln!(
        out,
        "  ranks      {} present of {}{}",
        r.ranks.len(),
        r.world_size
            .map_or("an unknown number".to_string(), |w| w.to_string()),
        r.nodes.map_or(String::new(), |n| format!(
            ", on {n} node{}",
            if n == 1 { "" } else { "s" }
        ))
    );
    let _ = writeln!(out, "  tiers      {}", r.tiers.join(", "));
    let _ = writeln!(
        out,
        "  scheme     {}",
        r.scheme.as_deref().unwrap_or("unknown (no manifest)")
    );
    let _ = writeln!(out, "  protection {}{}", r.protection, rebuild_hint(r));
    let _ = writeln!(
        out,
        "  size       {} per copy, {} stored",
        bytes(r.bytes),
        bytes(r.stored_bytes)
    );
    if let Some(c) = r.created_unix_ms {
        let _ = writeln!(out, "  created    {} UTC", utc(c));
    }
    if let Some(c) = r.capture_ns {
        let _ = writeln!(out, "  capture    {} (slowest rank)", ms(c));
    }
    if r.redundancy_bytes > 0 {
        let copies = r.holdings.iter().any(|h| !h.partner_copies.is_empty());
        let parity = r.holdings.iter().any(|h| !h.parity.is_empty());
        let what = match (copies, parity) {
            (true, true) => "partner copies and parity",
            (true, false) => "partner copies",
            _ => "parity",
        };
        let _ = writeln!(
            out,
            "  redundancy {} stored ({what})",
            bytes(r.redundancy_bytes)
        );
    }
    for p in &r.problems {
        let _ = writeln!(out, "  problem    {p}");
    }

    if !ins.manifests.is_empty() {
        let _ = writeln!(out, "\nmanifests");
        let mut rows = Vec::new();
        for m in &ins.manifests {
            let mf = &m.manifest;
            let ranks: Vec<String> = mf.ranks.iter().map(u32::to_string).collect();
            rows.push(vec![
                format!("  {}", m.place),
                mf.state.to_string(),
                format!("ranks {}", ranks.join(",")),
                format!("capture {}", ms(mf.capture_ns)),
                format!("created {}", utc(mf.created_unix_ms)),
                m.path.display().to_string(),
            ]);
        }
        out.push_str(&table(&rows));
    }

    if !r.holdings.is_empty() || !r.protection.lost_nodes.is_empty() {
        let _ = writeln!(out, "\nnodes");
        let mut nodes: Vec<(u32, Option<&_>)> =
            r.holdings.iter().map(|h| (h.node, Some(h))).collect();
        nodes.extend(r.protection.lost_nodes.iter().map(|n| (*n, None)));
        nodes.sort_by_key(|(n, _)| *n);
        for (n, h) in nodes {
            let Some(h) = h else {
                let _ = writeln!(out, "  node{n}  lost: no directory holds this checkpoint");
                continue;
            };
            let _ = writeln!(
                out,
                "  node{n}  parts of ranks {}  {}",
                if h.parts.is_empty() {
                    "(none)".to_string()
                } else {
                    join_ranks(&h.parts)
                },
                h.path.display()
            );
            // One row per object; a parity object's set on the line below it.
            let mut rows = Vec::new();
            let mut below: Vec<Option<String>> = Vec::new();
            let verdict = |e: &Option<String>| match e {
                None => "ok".to_string(),
                Some(e) => format!("DAMAGED: {e}"),
            };
            for c in &h.partner_copies {
                rows.push(vec![
                    format!("    partner copy of rank {}", c.rank),
                    bytes(c.bytes),
                    verdict(&c.error),
                    c.path.display().to_string(),
                ]);
                below.push(None);
            }
            for p in &h.parity {
                rows.push(vec![
                    format!("    parity of rank {}", p.rank),
                    bytes(p.bytes),
                    verdict(&p.error),
                    p.path.display().to_string(),
                ]);
                below.push(p.set.as_ref().map(|s| format!("      {}", set_phrase(s))));
            }
            for (line, extra) in table(&rows).lines().zip(below) {
                let _ = writeln!(out, "{line}");
                if let Some(x) = extra {
                    let _ = writeln!(out, "{x}");
                }
            }
        }
    }

    let _ = writeln!(out, "\nrank files");
    for f in &ins.files {
        let _ = writeln!(
            out,
            "  rank {}  {}  {}  {}",
            f.rank,
            f.place,
            bytes(f.file_bytes),
            f.path.display()
        );
        if let Some(e) = &f.error {
            let _ = writeln!(out, "    unreadable index: {e}");
            continue;
        }
        let _ = writeln!(
            out,
            "    written in {}, blocks of {}, format {}, {}",
            f.write_ns.map(ms).unwrap_or_else(|| "?".into()),
            f.block_size.map(|c| bytes(c as u64)).unwrap_or_default(),
            f.format.unwrap_or(0),
            match f.base {
                Some(b) => format!("incremental of v{b}"),
                None => "full".into(),
            }
        );
        let mut rows = vec![[
            "    REGION",
            "TYPE",
            "COUNT",
            "RAW",
            "STORED",
            "BLOCKS",
            "ZERO",
            "UNCHANGED",
            "CODECS",
        ]
        .map(String::from)
        .to_vec()];
        for g in &f.regions {
            rows.push(vec![
                format!("    {}", g.id),
                g.dtype.to_string(),
                g.count.to_string(),
                bytes(g.bytes),
                bytes(g.stored),
                g.blocks.to_string(),
                g.zero_blocks.to_string(),
                g.unchanged_blocks.to_string(),
                g.codecs.clone(),
            ]);
        }
        out.push_str(&table(&rows));
    }
    out
}

/// The `cairn verify` report: one line per checkpoint, then the damaged files, then a total.
pub fn verify(inv: &Inventory, checks: &[CkptCheck]) -> String {
    if checks.is_empty() {
        return format!("no checkpoints under {}\n", roots(inv));
    }
    let mut out = String::new();
    let mut rows = Vec::new();
    let mut details: Vec<Vec<String>> = Vec::new();
    for c in checks {
        let verdict = match c.verdict {
            Verdict::Ok => "OK",
            Verdict::Damaged => "DAMAGED",
            Verdict::Incomplete => "INCOMPLETE",
        };
        let parts: Vec<_> = c
            .files
            .iter()
            .filter(|f| f.kind == FileKind::Part)
            .collect();
        let extra: Vec<_> = c
            .files
            .iter()
            .filter(|f| f.kind != FileKind::Part)
            .collect();
        let good = parts.iter().filter(|f| f.ok).count();
        let mut summary = format!(
            "{good}/{} rank file{} intact",
            parts.len(),
            if parts.len() == 1 { "" } else { "s" }
        );
        if !extra.is_empty() {
            let _ = write!(
                summary,
                ", {}/{} redundancy file{} intact",
                extra.iter().filter(|f| f.ok).count(),
                extra.len(),
                if extra.len() == 1 { "" } else { "s" }
            );
        }
        let _ = write!(summary, ", {} checked", bytes(c.bytes));
        rows.push(vec![
            format!("{} v{}", c.name, c.version),
            verdict.to_string(),
            summary,
        ]);
        let mut d = Vec::new();
        for f in c.files.iter().filter(|f| !f.ok) {
            let what = match f.kind {
                FileKind::Part => format!("rank {}", f.rank),
                FileKind::Partner => format!("partner copy of rank {}", f.rank),
                FileKind::Parity => format!("parity of rank {}", f.rank),
            };
            d.push(format!(
                "  {what} ({}): {}\n    file {}",
                f.place,
                f.error.as_deref().unwrap_or("damaged"),
                f.path.display()
            ));
        }
        if c.protection.is_impaired() {
            d.push(format!("  protection: {}", c.protection));
        }
        if c.verdict != Verdict::Ok {
            for p in &c.problems {
                d.push(format!("  {p}"));
            }
        }
        details.push(d);
    }
    let lines = table(&rows);
    for (line, d) in lines.lines().zip(&details) {
        let _ = writeln!(out, "{line}");
        for l in d {
            let _ = writeln!(out, "{l}");
        }
    }
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        out,
        "{} checkpoint{} checked: {} OK, {} damaged, {} incomplete",
        checks.len(),
        if checks.len() == 1 { "" } else { "s" },
        count(Verdict::Ok),
        count(Verdict::Damaged),
        count(Verdict::Incomplete)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(10 * 1024), "10.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_763_734_143_500), "2025-11-21 14:09:03");
        assert_eq!(ms(1_234_567), "1.235 ms");
        let t = table(&[
            vec!["A".into(), "BB".into(), "C".into()],
            vec!["aaa".into(), "b".into(), "".into()],
        ]);
        assert_eq!(t, "A    BB  C\naaa  b\n");
    }
}
