-- Every distinct certificate delivery (completed or expired), in the order it was received.
SELECT
    event_id,
    inbox_id,
    sequence,
    event_type,
    received_at,
    source AS sender,
    id AS certificate_id,
    user_id,
    badge_id,
    creation_date AS completed_at,
    expires AS expires_at,
    updated_at
FROM lms.certificate_events
