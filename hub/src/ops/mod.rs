//! Operations plumbing: metrics, health endpoints, leader election, logging.
