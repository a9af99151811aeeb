//! Validation of API objects (upstream `pkg/apis/*/validation` and `apimachinery/pkg/api/validation`).

pub mod field;
