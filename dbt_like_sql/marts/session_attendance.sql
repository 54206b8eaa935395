-- Session attendance and fill rate: one row per lesson session.
-- seats_taken = approved registrations (waiting list, pending validation and rejected take no seat).
-- fill_rate = seats_taken / quota max, for quotas with a max (type max or min-max); NULL otherwise.
-- attendance_rate = attended / (attended + absent): among registrations whose attendance was recorded.
WITH registrations AS (
    SELECT
        session_id,
        count(*) AS registrations,
        count(*) FILTER (WHERE registration_status = 'approved') AS approved,
        count(*) FILTER (WHERE registration_status = 'waiting-list') AS waiting_list,
        count(*) FILTER (WHERE registration_status = 'pending-validation') AS pending_validation,
        count(*) FILTER (WHERE registration_status = 'rejected') AS rejected,
        count(*) FILTER (WHERE attendance = 'attended') AS attended,
        count(*) FILTER (WHERE attendance = 'absent') AS absent
    FROM analytics.stg_lesson_session_registrations
    GROUP BY session_id
)
SELECT
    s.session_id,
    s.session_title,
    s.lesson_id,
    s.session_status,
    s.starts_at,
    s.ends_at,
    s.quota_type,
    s.quota_min,
    s.quota_max,
    coalesce(r.registrations, 0) AS registrations,
    coalesce(r.approved, 0) AS seats_taken,
    coalesce(r.waiting_list, 0) AS waiting_list,
    coalesce(r.pending_validation, 0) AS pending_validation,
    coalesce(r.rejected, 0) AS rejected,
    coalesce(r.attended, 0) AS attended,
    coalesce(r.absent, 0) AS absent,
    CASE WHEN s.quota_type IN ('max', 'min-max') AND s.quota_max > 0
        THEN coalesce(r.approved, 0) / s.quota_max END AS fill_rate,
    CASE WHEN s.quota_type IN ('min', 'min-max')
        THEN coalesce(r.approved, 0) < s.quota_min END AS below_min_quota,
    r.attended / nullif(r.attended + r.absent, 0) AS attendance_rate
FROM analytics.stg_lesson_sessions AS s
LEFT JOIN registrations AS r ON r.session_id = s.session_id
