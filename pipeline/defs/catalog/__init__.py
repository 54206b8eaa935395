"""The catalog domain: lesson categories, and the lessons with their questions."""
