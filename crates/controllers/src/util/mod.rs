//! Helpers more than one controller needs (upstream keeps them in `pkg/controller/util` and
//! `pkg/controller/controller_utils.go`).

pub(crate) mod eviction;
