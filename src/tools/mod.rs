//! Tools a model can use inside a turn (SPEC §13). [`mcp`] is the client for MCP servers
//! (stdio and Streamable HTTP).

pub mod mcp;
