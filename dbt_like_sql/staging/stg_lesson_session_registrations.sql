-- Current registrations of users to lesson sessions.
SELECT
    session_id,
    user_id,
    status AS registration_status,
    attendance,
    registration_date AS registered_at,
    signature_date AS signed_at
FROM lms.lesson_session_registrations
WHERE deleted_at IS NULL
