//! What every request passes through before and after its handler: who calls
//! ([`client`], [`auth`]), what the request may be ([`guard`], [`limits`]) and the audit of what
//! it changed ([`audit`]). Layers name the API's roles and the job store, never a route.

pub mod audit;
pub mod auth;
pub mod client;
pub mod guard;
pub mod limits;
pub mod namespace;
