-- Lesson funnel: for every lesson of the catalogue (and any lesson learners have progress on), how many
-- learners are at each status. started = in progress + succeeded + failed; learners = started + not started.
-- median_hours_to_success: median of (last activity - start) over succeeded learners, in hours; the
-- platform does not expose the instant of success, so the last activity of a succeeded record stands in.
with

lessons as (

    select * from {{ ref('stg_lessons') }}

),

learner_progress as (

    select * from {{ ref('learner_progress') }}

),

learners_per_lesson as (

    select
        lesson_id,
        count(*) as learners,
        count(*) filter (where status <> 'not-started') as started,
        count(*) filter (where status = 'not-started') as not_started,
        count(*) filter (where status = 'in-progress') as in_progress,
        count(*) filter (where status = 'succeeded') as succeeded,
        count(*) filter (where status = 'failed') as failed,
        median(epoch(last_activity_at - started_at) / 3600.0)
        filter (where status = 'succeeded') as median_hours_to_success,
        median(time_spent) filter (where status = 'succeeded') as median_time_spent_to_success

    from learner_progress

    group by lesson_id

),

final as (

    -- full outer join: the catalogue's lessons, and lessons with progress that left the catalogue
    select
        lesson_id,
        lessons.lesson_title,
        lessons.lesson_status,
        coalesce(learners_per_lesson.learners, 0) as learners,
        coalesce(learners_per_lesson.not_started, 0) as not_started,
        coalesce(learners_per_lesson.started, 0) as started,
        coalesce(learners_per_lesson.in_progress, 0) as in_progress,
        coalesce(learners_per_lesson.succeeded, 0) as succeeded,
        coalesce(learners_per_lesson.failed, 0) as failed,
        {{ rate('learners_per_lesson.succeeded', 'learners_per_lesson.started') }} as success_rate,
        learners_per_lesson.median_hours_to_success,
        learners_per_lesson.median_time_spent_to_success

    from lessons

    full outer join learners_per_lesson using (lesson_id)

)

select * from final
