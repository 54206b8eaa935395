-- Lessons of the catalogue present at the platform.
SELECT
    id AS lesson_id,
    title AS lesson_title,
    status AS lesson_status,
    visibility,
    level,
    play_mode,
    category_ids,
    track_ids,
    summary
FROM lms.lessons
WHERE deleted_at IS NULL
