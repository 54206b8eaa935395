-- Lesson sessions present at the platform, with their quota flattened.
SELECT
    id AS session_id,
    lesson_id,
    title AS session_title,
    status AS session_status,
    quotas_type AS quota_type,
    quotas_min AS quota_min,
    quotas_max AS quota_max,
    start_date AS starts_at,
    end_date AS ends_at,
    creation_date AS created_at,
    on_site,
    is_live,
    location_name,
    location_room,
    len(presenters) AS presenter_count,
    creator_id
FROM lms.lesson_sessions
WHERE deleted_at IS NULL
