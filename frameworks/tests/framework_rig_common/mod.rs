//! What the rig tests run: the refund tools, the scripts of rig's scripted
//! model and a driver, and a tool whose refund number comes from the tool
//! context.

pub mod numbered;
pub mod script;
pub mod tools;
