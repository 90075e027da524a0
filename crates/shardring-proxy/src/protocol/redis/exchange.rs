//! What an exchange's replies come to: a fan-out's merged answer ([`merge_replies`]).

use bytes::Bytes;

use super::finish::RedisMerge;
use super::merge::{self, Part as MergePart};
use crate::protocol::{Answer, PartReply};

/// A fan-out's answer from its parts' replies, in the order of its parts.
pub(super) fn merge_replies(merge: RedisMerge, replies: Vec<PartReply<'_>>) -> Answer {
    let reasons: Vec<String> = replies
        .iter()
        .map(|r| {
            r.reply
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .collect();
    let parts: Vec<MergePart<'_>> = replies
        .iter()
        .zip(&reasons)
        .map(|(r, why)| match &r.reply {
            Ok(b) => MergePart::Reply(b),
            Err(_) => MergePart::Failed(why),
        })
        .collect();
    Answer::Bytes(match merge {
        RedisMerge::AllOk => merge::merge_all_ok(&parts),
        RedisMerge::Sum => merge::merge_sum(&parts),
        RedisMerge::Values {
            key_count,
            held,
            unrouted,
            limits,
            partial,
        } => {
            let mut with: Vec<(&[usize], MergePart<'_>)> =
                held.iter().map(|h| h.as_slice()).zip(parts).collect();
            if !unrouted.is_empty() {
                with.push((&unrouted, MergePart::Failed("no server available")));
            }
            merge::merge_values(key_count, &with, limits, partial)
        }
        // `advance` gives these to `replicas::advance`; the first reply stands in.
        RedisMerge::Replicated(_)
        | RedisMerge::ReplicatedValues(_)
        | RedisMerge::Dual(_)
        | RedisMerge::DualSplit(..)
        | RedisMerge::Span(_)
        | RedisMerge::Cluster(_)
        | RedisMerge::SplitWrite(_)
        | RedisMerge::SplitGet(_)
        | RedisMerge::SplitClean(_)
        | RedisMerge::Invalidating(..) => match parts.first() {
            Some(MergePart::Reply(b)) => Bytes::copy_from_slice(b),
            _ => merge::failure("no server available"),
        },
    })
}
