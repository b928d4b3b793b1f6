"""Event stores and read models on SQLite or PostgreSQL: recorders, projection runners, replay."""
