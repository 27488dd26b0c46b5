//! Nodes of their own on this host: a network namespace joined to this one by a veth pair,
//! whose link a test cuts, silences or shapes as a cable pulled or a congested switch port
//! would. Made and removed by root; the namespace goes when the value is dropped.

use std::process::Command;

use crate::sh;

/// A network namespace with a veth link to this one: a node of its own.
pub struct NetNode {
    pub name: String,
    host_if: String,
    pub addr: String,
}

impl NetNode {
    pub fn new(tag: &str, subnet: u8) -> NetNode {
        let name = format!("surge-{tag}-{}", std::process::id() % 100_000);
        let (host_if, node_if) = (format!("sgh{subnet}"), format!("sgn{subnet}"));
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let _ = Command::new("ip").args(["link", "del", &host_if]).output();
        sh(&format!(
            "ip netns add {name} && ip link add {host_if} type veth peer name {node_if} && ip link set {node_if} netns {name} \
             && ip addr add 10.77.{subnet}.1/24 dev {host_if} && ip link set {host_if} up \
             && ip netns exec {name} ip addr add 10.77.{subnet}.2/24 dev {node_if} \
             && ip netns exec {name} ip link set {node_if} up && ip netns exec {name} ip link set lo up"
        ));
        NetNode { name, host_if, addr: format!("10.77.{subnet}.2") }
    }

    /// Limits the link's rate from this side (the client's packets to the node): a token
    /// bucket, whose queue also delays them. (This kernel has no `netem`, so no pure delay.)
    pub fn shape(&self, rate: &str) {
        sh(&format!("tc qdisc replace dev {} root tbf rate {rate} burst 64kb latency 100ms", self.host_if));
    }

    pub fn unshape(&self) {
        sh(&format!("tc qdisc del dev {} root", self.host_if));
    }

    /// Takes the link down, as a pulled cable does: packets on established connections
    /// vanish, no error comes back from the network.
    pub fn cut(&self) {
        sh(&format!("ip link set {} down", self.host_if));
    }

    /// Takes the link down from the node's end: the host's end stays up (its address keeps
    /// answering on the host), and nothing the node sends arrives any more.
    pub fn silence(&self) {
        sh(&format!("ip netns exec {} ip link set sgn{} down", self.name, &self.host_if[3..]));
    }

    pub fn mend(&self) {
        sh(&format!("ip link set {} up", self.host_if));
    }

    /// Brings the node's end of the link back up (after [`NetNode::silence`]).
    pub fn unsilence(&self) {
        sh(&format!("ip netns exec {} ip link set sgn{} up", self.name, &self.host_if[3..]));
    }
}

impl Drop for NetNode {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
    }
}
