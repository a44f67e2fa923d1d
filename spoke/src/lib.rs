//! The spoke controller: runs the bursts a Flux hub assigns to this cluster.
