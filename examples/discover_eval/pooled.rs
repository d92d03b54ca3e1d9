//! The judged figure: leave-one-out over several held-out sets, their counts summed.
//!
//! `--pool PATH:PART ...` reads each file's part (`development`, `evaluation` or `whole`),
//! flags it by leave-one-out as the headline protocol does, prints each set's rows, then the
//! pooled rows: per environment, the true positives, false positives and misses of every set
//! summed, and the precision, recall and F1 of those sums (not a mean of the sets' F1), and
//! the best F1 of those flags adjusted verb by verb, knowing the labels (`adjust.rs`).

use std::collections::BTreeMap;

use beacon_rl::milestone::{DiscoveryConfig, MilestoneAgreement};
use beacon_rl::record::read_trajectories;
use beacon_rl::Result;

use crate::adjust::Adjustments;
use crate::protocol::{records_of, strip_all, Part};
use crate::{agreement, leave_one_out, print_adjusted, print_rows, BoxResult};

/// One `PATH:PART` argument.
fn parse(spec: &str) -> BoxResult<(&str, Part)> {
    let (path, part) = spec
        .rsplit_once(':')
        .ok_or_else(|| format!("--pool takes PATH:PART, not {spec:?}"))?;
    let part = match part {
        "development" => Part::Development,
        "evaluation" => Part::Evaluation,
        "whole" => Part::Whole,
        p => return Err(format!("a part is development, evaluation or whole, not {p:?}").into()),
    };
    Ok((path, part))
}

/// Prints each set's leave-one-out rows, then the pooled rows.
pub fn run(cfg: DiscoveryConfig, specs: &[String]) -> BoxResult<()> {
    if specs.is_empty() {
        return Err("--pool takes one PATH:PART or more".into());
    }
    let mut pooled: BTreeMap<String, MilestoneAgreement> = BTreeMap::new();
    let mut adjustments = Adjustments::default();
    for spec in specs {
        let (path, part) = parse(spec)?;
        let all = read_trajectories(std::io::BufReader::new(std::fs::File::open(path)?))
            .collect::<Result<Vec<_>>>()?;
        let (records, labels) = strip_all(&records_of(&all, part));
        let flags = leave_one_out(cfg, &records)?;
        let table = agreement(&records, &flags, &labels)?;
        adjustments.add(&records, &flags, &labels);
        println!("{spec}");
        print_rows(part.name(), "leave-one-out", &table);
        for (env, a) in table {
            *pooled.entry(env).or_default() += a;
        }
    }
    println!("pooled over the {} sets", specs.len());
    print_rows("pooled", "leave-one-out", &pooled);
    print_adjusted(&[("pooled", adjustments)]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::protocol::Part;

    #[test]
    fn a_spec_is_split_at_its_last_colon() {
        assert!(matches!(
            parse("/tmp/a:b.jsonl:whole"),
            Ok(("/tmp/a:b.jsonl", Part::Whole))
        ));
        assert!(matches!(
            parse("x.jsonl:evaluation"),
            Ok(("x.jsonl", Part::Evaluation))
        ));
        assert!(parse("x.jsonl").is_err());
        assert!(parse("x.jsonl:all").is_err());
    }
}
