//! Parsing `--nodes a,b=2,c` lists.

use anyhow::{bail, Context, Result};
use shardring::Node;

/// Parses a comma-separated node list: `NAME` or `NAME=WEIGHT` per entry.
///
/// A name may contain `:` (`10.0.0.1:11211=2`); the weight is what follows the last `=`. Every entry is
/// checked (empty names, bad or non-positive weights, duplicates) before anything is built.
pub fn parse_node_list(list: &str) -> Result<Vec<Node>> {
    if list.trim().is_empty() {
        bail!("the node list is empty: give --nodes NAME[=WEIGHT],...");
    }
    let mut nodes: Vec<Node> = Vec::new();
    for entry in list.split(',') {
        let entry = entry.trim();
        let (name, weight) = match entry.rsplit_once('=') {
            Some((name, weight)) => {
                let weight: f64 = weight.trim().parse().with_context(|| {
                    format!("node {entry:?}: weight {weight:?} is not a number")
                })?;
                (name.trim(), weight)
            }
            None => (entry, 1.0),
        };
        if name.is_empty() {
            bail!("node list {list:?} has an empty node name");
        }
        let node = Node::weighted(name, weight)?;
        if nodes.iter().any(|n| n.name() == node.name()) {
            bail!("node {:?} is listed twice", node.name());
        }
        nodes.push(node);
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_weights_and_ports() {
        let nodes = parse_node_list("a, 10.0.0.1:11211=2 ,c=0.5").unwrap();
        let got: Vec<(&str, f64)> = nodes.iter().map(|n| (n.name(), n.weight())).collect();
        assert_eq!(got, vec![("a", 1.0), ("10.0.0.1:11211", 2.0), ("c", 0.5)]);
    }

    #[test]
    fn rejects_bad_lists() {
        for bad in [
            "", " ", "a,,b", "a=0", "a=-1", "a=x", "a,a", "=3", "a=nan", "a=inf",
        ] {
            assert!(parse_node_list(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
