//! Capacity: requests rounded to a pool's unit, and which nodes hold an instance's servers.
//! Pure functions of the configuration and of what is charged, so they are tested alone.
//!
//! A request is charged in whole units of the pool's granularity (each copy), and a placement
//! never puts more on a node than its configured capacity less what is charged there already
//! (by instances of any pool): a request that does not fit is refused with the reason, never
//! placed in part.

use std::collections::HashMap;

use crate::config::{NodeConfig, PoolConfig, PoolKindConfig};

/// `capacity` rounded up to whole units of `granularity`, in units.
pub fn units(capacity: u64, granularity: u64) -> u64 {
    capacity.div_ceil(granularity)
}

/// Bytes of `node` not yet charged to an instance.
fn free(node: &NodeConfig, used: &HashMap<String, u64>) -> u64 {
    node.capacity.saturating_sub(used.get(&node.name).copied().unwrap_or(0))
}

/// Units of `pool` free for new instances: on each node, the whole units no server holds
/// (`used`: bytes held on each node, by instances of any pool — a node in two pools is
/// charged by both; a two-copy instance by both copies), less the units `unplaced` bytes
/// (planned instances of this pool that hold nothing on a node yet) will take.
pub fn free_units(pool: &PoolConfig, used: &HashMap<String, u64>, unplaced: u64) -> u64 {
    let free: u64 = pool.nodes.iter().map(|n| free(n, used) / pool.granularity).sum();
    free.saturating_sub(units(unplaced, pool.granularity))
}

/// How many copies of its data an instance of `mode` keeps in `pool`: a private namespace
/// lives and dies with its node, so it keeps one whatever the pool.
pub fn copies(pool: &PoolConfig, mode: &str) -> u8 {
    if mode == "private" {
        1
    } else {
        pool.replicas
    }
}

/// The least an instance of `capacity` bytes keeping `copies` copies holds on `pool`'s nodes,
/// in bytes: whole units, each copy; in a standing pool two copies take at least one unit on
/// each of two nodes, twice (see [`place_standing_mirrored`]).
pub fn least_held(pool: &PoolConfig, capacity: u64, copies: u8) -> u64 {
    let units = units(capacity, pool.granularity);
    let wanted = if copies > 1 && pool.kind == PoolKindConfig::Standing { units.max(2) } else { units };
    wanted * copies as u64 * pool.granularity
}

/// What a request of `capacity` bytes is charged: whole units, in bytes.
pub fn charged(capacity: u64, granularity: u64) -> u64 {
    units(capacity, granularity) * granularity
}

/// Where a standing-pool instance of `capacity` bytes goes (DataWarp's rule): rounded up to
/// the pool's unit, and spread one unit at a time over the nodes with the most free units, so
/// that it is striped over as many nodes as its units allow. Returns each chosen node with the
/// bytes it holds, or why it does not fit.
pub fn place_standing(pool: &PoolConfig, used: &HashMap<String, u64>, capacity: u64) -> Result<Vec<(String, u64)>, String> {
    let wanted = units(capacity, pool.granularity);
    let mut free: Vec<(String, u64)> = pool.nodes.iter().map(|n| (n.name.clone(), free(n, used) / pool.granularity)).collect();
    let available: u64 = free.iter().map(|(_, f)| f).sum();
    if wanted > available {
        return Err(format!(
            "pool '{}' has {available} free unit(s) of {}, the request needs {wanted}",
            pool.name,
            surge_units::format_size(pool.granularity)
        ));
    }
    let mut given: HashMap<String, u64> = HashMap::new();
    for _ in 0..wanted {
        // The node with the most free units left; ties by configuration order.
        let (name, left) = free.iter_mut().max_by(|a, b| a.1.cmp(&b.1).then(std::cmp::Ordering::Greater)).expect("nodes");
        *left -= 1;
        *given.entry(name.clone()).or_default() += 1;
    }
    // Server order follows the configuration, so a placement is reproducible.
    Ok(pool.nodes.iter().filter_map(|n| given.get(&n.name).map(|u| (n.name.clone(), u * pool.granularity))).collect())
}

/// Where a standing-pool instance of `capacity` bytes goes when it keeps two copies: over two
/// nodes or more, in equal shares of whole units (so that each server's mirror, its
/// predecessor's share, is the size of its own), each node holding twice its share; over as
/// many nodes as the units and the free room allow. Returns each chosen node with the bytes it
/// holds (share and mirror), or why it does not fit.
pub fn place_standing_mirrored(pool: &PoolConfig, used: &HashMap<String, u64>, capacity: u64) -> Result<Vec<(String, u64)>, String> {
    let wanted = units(capacity, pool.granularity).max(2);
    let free_units = |name: &str| pool.node(name).map_or(0, |n| free(n, used) / pool.granularity);
    // The nodes with the most room first; ties by configuration order.
    let mut roomiest: Vec<&str> = pool.nodes.iter().map(|n| n.name.as_str()).collect();
    roomiest.sort_by_key(|name| std::cmp::Reverse(free_units(name)));
    for servers in (2..=wanted.min(roomiest.len() as u64)).rev() {
        let share = wanted.div_ceil(servers);
        let chosen = &roomiest[..servers as usize];
        if chosen.iter().all(|name| free_units(name) >= 2 * share) {
            let held = 2 * share * pool.granularity;
            return Ok(pool.nodes.iter().filter(|n| chosen.contains(&n.name.as_str())).map(|n| (n.name.clone(), held)).collect());
        }
    }
    Err(format!(
        "pool '{}' keeps two copies on different nodes: no two of its nodes have room for {} unit(s) of {} each (share and mirror)",
        pool.name,
        2 * wanted.div_ceil(2),
        surge_units::format_size(pool.granularity)
    ))
}

/// Where an on-demand instance goes: one server on each of the job's nodes, the charged
/// capacity shared equally. Every node must be in the pool and have room for its share, twice
/// with two copies (its share and its predecessor's mirror), which need two nodes or more.
pub fn place_on_demand(
    pool: &PoolConfig,
    used: &HashMap<String, u64>,
    nodes: &[String],
    charged: u64,
    replicas: u8,
) -> Result<Vec<(String, u64)>, String> {
    if nodes.is_empty() {
        return Err("the job has no nodes".into());
    }
    if replicas > 1 && nodes.len() < 2 {
        return Err(format!("pool '{}' keeps two copies on different nodes: the job has one node", pool.name));
    }
    let share = charged.div_ceil(nodes.len() as u64) * replicas as u64;
    let mut placed = Vec::new();
    for name in nodes {
        let node = pool.node(name).ok_or_else(|| format!("node {name} is not in pool '{}'", pool.name))?;
        let free = free(node, used);
        if share > free {
            return Err(format!(
                "node {name} has {} free in pool '{}', its share of the buffer is {}",
                surge_units::format_size(free),
                pool.name,
                surge_units::format_size(share)
            ));
        }
        placed.push((name.clone(), share));
    }
    Ok(placed)
}

/// Where a private instance of a standing pool goes once its job's nodes are known: one
/// namespace for each of the job's `count` compute nodes, each a server on one of the pool's
/// nodes holding an equal part of the `charged` capacity, each to the node with the most free
/// bytes (ties by configuration order), several on one node where it has room. Server `k` is
/// compute node `k`'s. Refused, with the reason, when a part fits on no node.
pub fn place_private_standing(
    pool: &PoolConfig,
    used: &HashMap<String, u64>,
    count: usize,
    charged: u64,
) -> Result<Vec<(String, u64)>, String> {
    if count == 0 {
        return Err("the job has no nodes".into());
    }
    let share = charged.div_ceil(count as u64);
    let mut free: Vec<(String, u64)> = pool.nodes.iter().map(|n| (n.name.clone(), free(n, used))).collect();
    let mut placed = Vec::with_capacity(count);
    for k in 0..count {
        let (name, left) = free.iter_mut().max_by(|a, b| a.1.cmp(&b.1).then(std::cmp::Ordering::Greater)).expect("nodes");
        if *left < share {
            return Err(format!(
                "pool '{}' has no node with {} free for compute node {} of {count} (each node's private namespace is {} of the \
                 buffer, on one burst-buffer node); the most free is {} on {name}",
                pool.name,
                surge_units::format_size(share),
                k + 1,
                surge_units::format_size(share),
                surge_units::format_size(*left),
            ));
        }
        *left -= share;
        placed.push((name.clone(), share));
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn pool(capacities: &[u64]) -> PoolConfig {
        PoolConfig {
            name: "bb".into(),
            kind: PoolKindConfig::Standing,
            granularity: GIB,
            nodes: capacities
                .iter()
                .enumerate()
                .map(|(i, c)| NodeConfig { name: format!("bb{}", i + 1), agent: String::new(), capacity: *c })
                .collect(),
            replicas: 1,
            failover_after: None,
        }
    }

    #[test]
    fn a_request_is_rounded_up_and_striped_over_as_many_nodes_as_its_units() {
        let pool = pool(&[4 * GIB, 4 * GIB, 4 * GIB]);
        let none = HashMap::new();
        // 1.5 GiB is 2 units: two nodes, one unit each.
        assert_eq!(place_standing(&pool, &none, 3 * GIB / 2).unwrap(), vec![("bb1".into(), GIB), ("bb2".into(), GIB)]);
        // 5 units over 3 nodes: 2, 2, 1.
        let five = place_standing(&pool, &none, 5 * GIB).unwrap();
        assert_eq!(five.iter().map(|(_, b)| b / GIB).collect::<Vec<_>>(), vec![2, 2, 1]);
        // What is used elsewhere counts: bb1 full, so 2 units go to bb2 and bb3.
        let used = HashMap::from([("bb1".to_string(), 4 * GIB)]);
        assert_eq!(place_standing(&pool, &used, 2 * GIB).unwrap(), vec![("bb2".into(), GIB), ("bb3".into(), GIB)]);
        let refused = place_standing(&pool, &used, 9 * GIB).unwrap_err();
        assert!(refused.contains("8 free unit(s)") && refused.contains("needs 9"), "{refused}");
    }

    #[test]
    fn on_demand_shares_the_charge_over_the_jobs_nodes_and_refuses_strangers() {
        let pool = pool(&[4 * GIB, 4 * GIB]);
        let nodes = vec!["bb1".to_string(), "bb2".to_string()];
        assert_eq!(
            place_on_demand(&pool, &HashMap::new(), &nodes, 3 * GIB, 1).unwrap(),
            vec![("bb1".into(), 3 * GIB / 2), ("bb2".into(), 3 * GIB / 2)]
        );
        assert!(place_on_demand(&pool, &HashMap::new(), &["n9".to_string()], GIB, 1).unwrap_err().contains("not in pool"));
        let used = HashMap::from([("bb2".to_string(), 3 * GIB)]);
        assert!(place_on_demand(&pool, &used, &nodes, 4 * GIB, 1).unwrap_err().contains("node bb2 has 1.0 GiB free"));
        // Two copies: each node holds its share and its predecessor's, and one node is not enough.
        assert_eq!(
            place_on_demand(&pool, &HashMap::new(), &nodes, 2 * GIB, 2).unwrap(),
            vec![("bb1".into(), 2 * GIB), ("bb2".into(), 2 * GIB)]
        );
        assert!(place_on_demand(&pool, &HashMap::new(), &nodes, 6 * GIB, 2).unwrap_err().contains("its share of the buffer is 6.0 GiB"));
        assert!(place_on_demand(&pool, &HashMap::new(), &nodes[..1], GIB, 2).unwrap_err().contains("the job has one node"));
    }

    #[test]
    fn a_private_standing_instance_gives_each_compute_node_a_part_on_the_roomiest_node() {
        let pool = pool(&[4 * GIB, 2 * GIB]);
        let none = HashMap::new();
        // 3 GiB over 3 compute nodes: 1 GiB each, to bb1 (4 free), bb1 (3 free), then bb1 and
        // bb2 tie at 2 free and configuration order decides.
        assert_eq!(
            place_private_standing(&pool, &none, 3, 3 * GIB).unwrap(),
            vec![("bb1".into(), GIB), ("bb1".into(), GIB), ("bb1".into(), GIB)]
        );
        let used = HashMap::from([("bb1".to_string(), 3 * GIB)]);
        assert_eq!(place_private_standing(&pool, &used, 2, 2 * GIB).unwrap(), vec![("bb2".into(), GIB), ("bb1".into(), GIB)]);
        // 3 GiB for 2 nodes: 1.5 GiB each; bb2 (2 free) takes one, bb1 (1 free) none: a part
        // must fit on one node, even where the pool has the room in all.
        let split = place_private_standing(&pool, &used, 2, 3 * GIB).unwrap_err();
        assert!(split.contains("for compute node 2 of 2") && split.contains("the most free is 1.0 GiB on bb1"), "{split}");
        let refused = place_private_standing(&pool, &used, 1, 3 * GIB).unwrap_err();
        assert!(refused.contains("no node with 3.0 GiB free for compute node 1 of 1"), "{refused}");
        assert!(place_private_standing(&pool, &none, 0, GIB).unwrap_err().contains("no nodes"));
    }

    #[test]
    fn two_copies_go_to_two_nodes_or_more_each_holding_its_share_twice() {
        let pool = pool(&[4 * GIB, 4 * GIB, 4 * GIB]);
        let none = HashMap::new();
        let units = |placed: Vec<(String, u64)>| placed.into_iter().map(|(n, b)| (n, b / GIB)).collect::<Vec<_>>();
        // One unit still goes to two nodes (a mirror must be elsewhere): one unit each, held twice.
        assert_eq!(units(place_standing_mirrored(&pool, &none, GIB).unwrap()), vec![("bb1".into(), 2), ("bb2".into(), 2)]);
        // Three units over three nodes, one each.
        assert_eq!(units(place_standing_mirrored(&pool, &none, 3 * GIB).unwrap()).len(), 3);
        // Five units: over three nodes, shares of 2 each need 4 units per node, which fit.
        assert_eq!(
            units(place_standing_mirrored(&pool, &none, 5 * GIB).unwrap()),
            vec![("bb1".into(), 4), ("bb2".into(), 4), ("bb3".into(), 4)]
        );
        // With bb1 full, two units go to bb2 and bb3.
        let used = HashMap::from([("bb1".to_string(), 4 * GIB)]);
        assert_eq!(units(place_standing_mirrored(&pool, &used, 2 * GIB).unwrap()), vec![("bb2".into(), 2), ("bb3".into(), 2)]);
        // Six units on two free nodes would need 6 units each: refused, the reason named.
        assert!(place_standing_mirrored(&pool, &used, 6 * GIB).unwrap_err().contains("keeps two copies on different nodes"));
    }

    /// What a pool reports free is what the nodes do not hold: a two-copy instance whose
    /// placement rounded up (one unit asked, two nodes holding it twice) is charged the four
    /// units it holds, a node shared with another pool is charged that pool's use too, and an
    /// instance not placed yet is charged what it will hold.
    #[test]
    fn a_pool_reports_free_what_its_nodes_do_not_hold() {
        let pool = pool(&[4 * GIB, 4 * GIB, 4 * GIB]);
        let mut used: HashMap<String, u64> = HashMap::new();
        assert_eq!(free_units(&pool, &used, 0), 12);
        for (node, bytes) in place_standing_mirrored(&pool, &used, GIB).unwrap() {
            *used.entry(node).or_default() += bytes;
        }
        assert_eq!(free_units(&pool, &used, 0), 8, "one unit kept twice on two nodes holds four");
        *used.entry("bb3".into()).or_default() += GIB / 2;
        assert_eq!(free_units(&pool, &used, 0), 7, "half a unit held by another pool on bb3 leaves it 3 whole units");
        assert_eq!(free_units(&pool, &used, 3 * GIB / 2), 5, "an unplaced instance of 1.5 GiB will take 2");
        assert_eq!(free_units(&pool, &used, 100 * GIB), 0);
    }

    #[test]
    fn the_least_an_instance_holds_counts_both_copies() {
        let mut standing = pool(&[4 * GIB, 4 * GIB]);
        assert_eq!(least_held(&standing, 3 * GIB / 2, 1), 2 * GIB);
        assert_eq!(least_held(&standing, 3 * GIB / 2, 2), 4 * GIB);
        // In a standing pool one unit still takes a unit on each of two nodes, twice.
        assert_eq!(least_held(&standing, GIB, 2), 4 * GIB);
        standing.kind = PoolKindConfig::OnDemand;
        assert_eq!(least_held(&standing, GIB, 2), 2 * GIB, "on the job's nodes the charge is shared, each share kept twice");
        standing.replicas = 2;
        assert_eq!(copies(&standing, "striped"), 2);
        assert_eq!(copies(&standing, "private"), 1, "a private namespace keeps one copy");
    }
}
