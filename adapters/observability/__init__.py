"""What operators see: metrics, request and run context, and logs."""
