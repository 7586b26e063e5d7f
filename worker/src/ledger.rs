//! Ticks settled after the fact: misfire handling after downtime ([`catchup`], with the sweep of
//! the unsettled ledger) and the executions a departed worker held ([`loss`]). Built on the fire
//! path's close and settle; the fire path never calls back into it.

pub mod catchup;
pub mod loss;
