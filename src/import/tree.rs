//! Checks a reader runs on a conversation's message tree before handing it on: the
//! conversion downstream walks parent links and must be able to trust them. Pure.

use std::collections::{HashMap, HashSet};

use super::Message;

/// Why a message tree cannot be imported: one reason, naming the message.
pub fn check(messages: &[Message], current: Option<&str>) -> Result<(), String> {
    let mut by_id: HashMap<&str, Option<&str>> = HashMap::with_capacity(messages.len());
    for m in messages {
        if by_id.insert(&m.id, m.parent.as_deref()).is_some() {
            return Err(format!("message id {:?} appears twice", m.id));
        }
    }
    for m in messages {
        if let Some(parent) = m.parent.as_deref() {
            if !by_id.contains_key(parent) {
                return Err(format!(
                    "message {:?} has parent {parent:?}, which is not in the conversation",
                    m.id
                ));
            }
        }
    }
    // Every message must reach a root. Walk up from each one, remembering the messages
    // already known to reach a root, so the whole check is linear.
    let mut rooted: HashSet<&str> = HashSet::with_capacity(messages.len());
    for m in messages {
        let mut path: Vec<&str> = Vec::new();
        let mut on_path: HashSet<&str> = HashSet::new();
        let mut at: Option<&str> = Some(&m.id);
        while let Some(id) = at {
            if rooted.contains(id) {
                break;
            }
            if !on_path.insert(id) {
                return Err(format!(
                    "the parent links around message {id:?} form a cycle"
                ));
            }
            path.push(id);
            at = by_id.get(id).copied().flatten();
        }
        rooted.extend(path);
    }
    if let Some(current) = current {
        if !by_id.contains_key(current) {
            return Err(format!(
                "the current message {current:?} is not in the conversation"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::Role;
    use proptest::prelude::*;

    fn msg(id: &str, parent: Option<&str>) -> Message {
        Message {
            id: id.into(),
            parent: parent.map(Into::into),
            role: Role::User,
            text: String::new(),
            created_at: None,
            model: None,
            tool_name: None,
            skipped: Vec::new(),
        }
    }

    #[test]
    fn a_branching_tree_passes() {
        let m = [
            msg("a", None),
            msg("b", Some("a")),
            msg("c", Some("a")),
            msg("d", Some("c")),
        ];
        assert_eq!(check(&m, Some("d")), Ok(()));
        assert_eq!(check(&m, None), Ok(()));
        assert_eq!(check(&[], None), Ok(()));
    }

    #[test]
    fn hostile_trees_are_named() {
        let dup = [msg("a", None), msg("a", None)];
        assert!(
            check(&dup, None)
                .unwrap_err()
                .contains("\"a\" appears twice")
        );
        let orphan = [msg("a", None), msg("b", Some("zz"))];
        assert!(check(&orphan, None).unwrap_err().contains("\"zz\""));
        let cycle = [msg("r", None), msg("a", Some("b")), msg("b", Some("a"))];
        assert!(check(&cycle, None).unwrap_err().contains("cycle"));
        let own = [msg("a", Some("a"))];
        assert!(check(&own, None).unwrap_err().contains("cycle"));
        let lost = [msg("a", None)];
        assert!(check(&lost, Some("b")).unwrap_err().contains("current"));
    }

    proptest! {
        /// Parents drawn from earlier messages always make a tree; closing any one link
        /// back onto a descendant (or itself) always makes a cycle that is found.
        #[test]
        fn trees_pass_and_any_back_link_is_a_cycle(
            parents in prop::collection::vec(any::<prop::sample::Index>(), 1..40),
            pick in any::<prop::sample::Index>(),
        ) {
            let ids: Vec<String> = (0..=parents.len()).map(|i| format!("m{i}")).collect();
            let mut tree = vec![msg(&ids[0], None)];
            for (i, p) in parents.iter().enumerate() {
                let parent = &ids[p.index(i + 1)];
                tree.push(msg(&ids[i + 1], Some(parent)));
            }
            prop_assert_eq!(check(&tree, Some(ids.last().unwrap())), Ok(()));
            // Point the root at a message below it: every message now loops.
            let below = &ids[pick.index(ids.len())];
            tree[0].parent = Some(below.clone());
            prop_assert!(check(&tree, None).unwrap_err().contains("cycle"));
        }
    }
}
