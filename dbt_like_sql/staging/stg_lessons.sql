-- Lessons of the catalogue present at the platform.
with

source as (

    select * from {{ source('lms', 'lessons') }}

),

renamed as (

    select
        id as lesson_id,
        title as lesson_title,
        status as lesson_status,
        visibility,
        level,
        play_mode,
        category_ids,
        track_ids,
        summary

    from source
    where deleted_at is null

)

select * from renamed
