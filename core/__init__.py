"""The layer below every other package but the SDK: facts each of them reads (it imports
only the SDK's wire contract, `tmr_client`, and re-exports it)."""
